package checker

import (
	"fmt"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

// checkFencing (I5): every action with a stale token is refused and
// recorded.
//
// A token is stale from the earliest observation that it had ended
// (endings.go). Then:
//   - the fenced sink must reject a write whose fence check began after
//     that; the unfenced sink's stale acceptances are counted, not flagged:
//     they are what fencing exists to prevent;
//   - a start or release acknowledged although invoked after that acted on
//     a stale token;
//   - a lease's first acknowledged report must have been invoked before
//     the lease was seen ended (a later repeat of the same report id gets
//     the first answer and is fine; another report id is I6's business);
//     this also catches a report whose answer was lost but which the final
//     state shows landed;
//   - a heartbeat must not answer keep or stop for a lease whose end an
//     acknowledged write had already shown;
//   - when the event log is complete, every STALE_TOKEN refusal has its
//     lease.stale_report (with the report's ref) or lease.stale_action
//     event, and every CONFLICT on a report its lease.report_conflict.
//
// Calls that overlap the end are not judged: either order was possible.
func checkFencing(v *view, r *Result) {
	checkSinks(v, r)
	checkStaleActions(v, r)
	checkFirstReports(v, r)
	checkStaleHeartbeats(v, r)
	if v.eventsComplete() {
		checkRefusalsRecorded(v, r)
	} else {
		r.note("event log not complete: refusals not matched with their events")
	}
	for _, vio := range r.Violations {
		if vio.JobID != "" {
			v.fenceBad[vio.JobID] = true
		}
	}
}

func checkSinks(v *view, r *Result) {
	var fenced, rejected, unfenced, unfencedStale float64
	for _, i := range v.sinks {
		e := &v.entries[i]
		s := e.Sink
		at := e.Ns
		if s.CheckNs != 0 {
			at = s.CheckNs
		}
		ended, endIdx, why := v.endedAt(s.JobID, s.Token, fromAny)
		stale := ended < at
		if s.Sink == history.SinkUnfenced {
			unfenced++
			if s.Accepted && stale {
				unfencedStale++
			}
			continue
		}
		fenced++
		if !s.Accepted {
			rejected++
			continue
		}
		if stale {
			r.add(fmt.Sprintf("fenced sink accepted job %s token %d at %s, after it had ended (%s)",
				s.JobID, s.Token, v.at(at), why), s.JobID, s.Token, endIdx, i)
		}
	}
	r.Stats["fenced_writes"] = fenced
	r.Stats["fenced_rejected"] = rejected
	r.Stats["unfenced_writes"] = unfenced
	r.Stats["unfenced_stale_accepted"] = unfencedStale
}

func checkStaleActions(v *view, r *Result) {
	for i := range v.ops {
		op := &v.ops[i]
		if op.Status != history.StatusOK || (op.Name != history.OpStart && op.Name != history.OpRelease) {
			continue
		}
		ended, endIdx, why := v.endedAt(op.Input.JobID, op.Input.Token, fromAny)
		if ended < op.InvokeNs {
			r.add(fmt.Sprintf("%s of job %s token %d acknowledged, though invoked after the lease had ended (%s)",
				op.Name, op.Input.JobID, op.Input.Token, why), op.Input.JobID, op.Input.Token, endIdx, op.Index)
		}
	}
}

// checkFirstReports: the report that ended a lease was sent while it was
// live.
func checkFirstReports(v *view, r *Result) {
	checked := map[leaseKey]bool{}
	for i := range v.ops {
		op := &v.ops[i]
		k := leaseKey{op.Input.JobID, op.Input.Token}
		if op.Name != history.OpReport || checked[k] {
			continue
		}
		rid, ok := v.firstReportID(k)
		if !ok {
			continue
		}
		checked[k] = true
		first := -1
		for _, j := range v.jobOps[k.job] {
			o := &v.ops[j]
			if o.Name == history.OpReport && o.Input.Token == k.token && o.Input.ReportID == rid &&
				(first < 0 || o.InvokeNs < v.ops[first].InvokeNs) {
				first = j
			}
		}
		if first < 0 {
			continue
		}
		fo := &v.ops[first]
		ended, endIdx, why := v.endedAt(k.job, k.token, fromAny)
		if ended < fo.InvokeNs {
			r.add(fmt.Sprintf("report %s on job %s token %d took effect, though invoked after the lease had ended (%s)",
				rid, k.job, k.token, why), k.job, k.token, endIdx, fo.Index)
		}
	}
}

// firstReportID is the report id that ended a lease by a report: the final
// state's record, or else the earliest acknowledged report's.
func (v *view) firstReportID(k leaseKey) (string, bool) {
	for _, f := range v.finals {
		if j, ok := f.jobs[k.job]; ok {
			if l, ok := finalLease(j, k.token); ok && l.State == history.LeaseReported {
				return l.ReportID, true
			}
		}
	}
	best := -1
	for _, j := range v.jobOps[k.job] {
		o := &v.ops[j]
		if o.Name == history.OpReport && o.Status == history.StatusOK && o.Input.Token == k.token &&
			(best < 0 || o.CompleteNs < v.ops[best].CompleteNs) {
			best = j
		}
	}
	if best < 0 {
		return "", false
	}
	return v.ops[best].Input.ReportID, true
}

// checkStaleHeartbeats trusts only acknowledged writes as proof of an end:
// their answers come from the leader after it applied them, which holds
// for whatever leader answers the heartbeat.
func checkStaleHeartbeats(v *view, r *Result) {
	for _, w := range sortedKeys(v.heartbeats) {
		for _, i := range v.heartbeats[w] {
			op := &v.ops[i]
			if op.Status != history.StatusOK {
				continue
			}
			for _, vd := range op.Output.Verdicts {
				if vd.Verdict != history.VerdictKeep && vd.Verdict != history.VerdictStop {
					continue
				}
				ended, endIdx, why := v.endedAt(vd.JobID, vd.Token, fromOp)
				if ended < op.InvokeNs {
					r.add(fmt.Sprintf("heartbeat of %s answered %s for job %s token %d after the lease had ended (%s)",
						op.Input.WorkerID, vd.Verdict, vd.JobID, vd.Token, why), vd.JobID, vd.Token, endIdx, op.CompleteIndex)
				}
			}
			// Leases the answer says the worker holds without naming
			// them: the same stale answer (a deposed leader's), about
			// leases the worker has stopped running. Their end is often
			// seen only as an event (an expired run-style job is never
			// granted again); an event is read from a node that applied
			// it, which the answering leader may trail by a moment, so an
			// event counts only when seen a renew before the call.
			for _, u := range op.Output.Unnamed {
				ended, endIdx, why := v.endedAt(u.JobID, u.Token, fromOp)
				if evEnd, evIdx, evWhy := v.endedAt(u.JobID, u.Token, fromEvent|fromRead); evEnd != never && evEnd+int64(v.opts.Renew) < ended {
					ended, endIdx, why = evEnd+int64(v.opts.Renew), evIdx, evWhy
				}
				if ended < op.InvokeNs {
					r.add(fmt.Sprintf("heartbeat of %s was told it still holds job %s token %d after the lease had ended (%s)",
						op.Input.WorkerID, u.JobID, u.Token, why), u.JobID, u.Token, endIdx, op.CompleteIndex)
				}
			}
		}
	}
}

func checkRefusalsRecorded(v *view, r *Result) {
	type evKey struct {
		typ, job string
		token    uint64
	}
	seen := map[evKey][]*history.ClusterEvent{}
	for _, e := range v.events {
		k := evKey{e.ev.Type, e.ev.JobID, e.ev.Token}
		seen[k] = append(seen[k], e.ev)
	}
	refused := 0
	for i := range v.ops {
		op := &v.ops[i]
		if op.Status != history.StatusFail {
			continue
		}
		in := &op.Input
		var want string
		match := func(*history.ClusterEvent) bool { return true }
		switch {
		case op.Reason == transport.ReasonStaleToken && op.Name == history.OpReport:
			want = history.EventStaleReport
			match = func(e *history.ClusterEvent) bool { return e.Ref == in.Ref }
		case op.Reason == transport.ReasonStaleToken && (op.Name == history.OpStart || op.Name == history.OpRelease):
			want = history.EventStaleAction
			match = func(e *history.ClusterEvent) bool { return e.Detail == "" || e.Detail == op.Name }
		case op.Reason == transport.ReasonConflict && op.Name == history.OpReport:
			want = history.EventReportConflict
		default:
			continue
		}
		refused++
		found := false
		for _, e := range seen[evKey{want, in.JobID, in.Token}] {
			if match(e) {
				found = true
				break
			}
		}
		if !found {
			r.add(fmt.Sprintf("%s of job %s token %d refused %s, but no %s event recorded it",
				op.Name, in.JobID, in.Token, op.Reason, want), in.JobID, in.Token, op.CompleteIndex)
		}
	}
	r.Stats["refusals_matched"] = float64(refused)
}
