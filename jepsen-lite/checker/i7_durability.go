package checker

import (
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

// checkDurability (I7): every acknowledged write survives kills and
// failovers.
//
// Against every final state: an acknowledged submit's job exists; an
// acknowledged report's lease is reported with that report id and
// outcome; an acknowledged release's lease is released; an acknowledged
// start's lease is started; a cancel acknowledged as cancelling leaves the
// job cancelled. (Acknowledged grants are I1's.) A job missing from a
// final state is a loss unless the listing was partial (not judged) or
// Options.AllowCompacted (counted). A lease older than the server's lease
// history is not judged. Without lease details in the final states only
// job presence and states are checked.
//
// A write acknowledged while a node's disk was full is a write like any
// (counted apart: acked_while_disk_full). A definite refusal is no write:
// a call answered DISK_FULL (the node, its disk known full, refused it
// before proposing it; a leader whose own append fails answers
// OUTCOME_UNKNOWN, as its followers may hold the batch),
// QUOTA_EXCEEDED, TOO_LARGE, RATE_LIMITED or a credential's refusal must
// leave nothing behind, so a job whose every submit was refused so may not
// exist in any final state.
func checkDurability(v *view, r *Result) {
	countDiskFull(v, r)
	if len(v.finals) == 0 {
		r.note("no final states: durability not checked")
		return
	}
	checkRefusedUnwritten(v, r)
	compacted, checked := 0, 0
	for _, f := range v.finals {
		find := func(job string, refs ...int) (*history.JobSummary, bool) {
			j, ok := f.jobs[job]
			if ok {
				return j, true
			}
			switch {
			case !f.fs.Complete:
				r.note("a final state does not list every job: missing jobs not judged")
			case v.opts.AllowCompacted:
				compacted++
			default:
				r.add(fmt.Sprintf("node %s: job %s is missing after an acknowledged write", f.fs.Node, job),
					job, 0, append(refs, f.idx)...)
			}
			return nil, false
		}
		for i := range v.ops {
			op := &v.ops[i]
			if op.Status != history.StatusOK {
				continue
			}
			in := &op.Input
			switch op.Name {
			case history.OpSubmit:
				checked++
				find(in.JobID, op.CompleteIndex)
			case history.OpReport, history.OpRelease, history.OpStart:
				checked++
				j, ok := find(in.JobID, op.CompleteIndex)
				if ok {
					checkLeaseKept(v, r, f, j, op)
				}
			case history.OpCancel, history.OpKill:
				if op.Output.State != history.JobCancelled {
					continue
				}
				checked++
				if j, ok := find(in.JobID, op.CompleteIndex); ok && j.State != history.JobCancelled {
					r.add(fmt.Sprintf("node %s: job %s is %s after an acknowledged cancel", f.fs.Node, j.ID, j.State),
						j.ID, 0, op.CompleteIndex, f.idx)
				}
			case history.OpCancelSubmitter:
				for _, id := range op.Output.Cancelled {
					checked++
					if j, ok := find(id, op.CompleteIndex); ok && j.State != history.JobCancelled {
						r.add(fmt.Sprintf("node %s: job %s is %s after an acknowledged cancel", f.fs.Node, id, j.State),
							id, 0, op.CompleteIndex, f.idx)
					}
				}
			}
		}
	}
	r.Stats["writes_checked"] = float64(checked)
	r.Stats["jobs_compacted"] = float64(compacted)
}

// checkLeaseKept checks one acknowledged lease write against a final job.
func checkLeaseKept(v *view, r *Result, f final, j *history.JobSummary, op *history.Operation) {
	in := &op.Input
	bad := func(msg string) {
		r.add(fmt.Sprintf("node %s: job %s token %d: %s", f.fs.Node, j.ID, in.Token, msg), j.ID, in.Token, op.CompleteIndex, f.idx)
	}
	if len(j.Leases) == 0 {
		if len(j.Tokens) > 0 && !containsU(j.Tokens, in.Token) && !v.trimmed(j, in.Token) {
			bad(fmt.Sprintf("acknowledged %s, but the token is not among the job's", op.Name))
		}
		r.note("final states carry no lease details: report, release and start outcomes not checked")
		return
	}
	l, ok := finalLease(j, in.Token)
	if !ok {
		if !v.trimmed(j, in.Token) {
			bad(fmt.Sprintf("acknowledged %s, but the lease is gone", op.Name))
		}
		return
	}
	switch op.Name {
	case history.OpReport:
		switch {
		case l.State != history.LeaseReported:
			bad(fmt.Sprintf("report %s acknowledged, but the lease is %s", in.ReportID, l.State))
		case l.ReportID != in.ReportID:
			bad(fmt.Sprintf("report %s acknowledged, but the lease keeps report %s", in.ReportID, l.ReportID))
		case l.Outcome == history.OutcomeTimedOut && v.timed(j.ID):
			// Its leader timed the lease out: the attempt is timed_out,
			// whatever its worker reported.
		case in.Outcome != "" && l.Outcome != in.Outcome:
			bad(fmt.Sprintf("report %s acknowledged with outcome %s, but the lease keeps %s", in.ReportID, in.Outcome, l.Outcome))
		}
	case history.OpRelease:
		if l.State != history.LeaseReleased {
			bad(fmt.Sprintf("release acknowledged, but the lease is %s", l.State))
		}
	case history.OpStart:
		if !l.Started {
			bad("start acknowledged, but the lease was never started")
		}
	}
}

func containsU(xs []uint64, x uint64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// unwrittenReasons are refusals that say the write was not made: neither
// logged nor applied.
var unwrittenReasons = map[string]bool{
	transport.ReasonDiskFull: true, transport.ReasonQuotaExceeded: true, transport.ReasonTooLarge: true,
	transport.ReasonRateLimited: true, transport.ReasonUnauthenticated: true, transport.ReasonForbidden: true,
}

// isWrite names the ops that change the state.
func isWrite(name string) bool {
	switch name {
	case history.OpSubmit, history.OpAcquire, history.OpStart, history.OpReport, history.OpRelease, history.OpCancel,
		history.OpKill, history.OpCancelSubmitter, history.OpRegister, history.OpDeregister:
		return true
	}
	return false
}

// countDiskFull counts the writes acknowledged while a disk fault was on
// and the calls refused DISK_FULL.
func countDiskFull(v *view, r *Result) {
	acked, refused := 0, 0
	for i := range v.ops {
		op := &v.ops[i]
		if !isWrite(op.Name) {
			continue
		}
		switch {
		case op.Status == history.StatusFail && op.Reason == transport.ReasonDiskFull:
			refused++
		case op.Status == history.StatusOK && slices.ContainsFunc(v.faults, func(f faultSpn) bool {
			return f.disk && f.overlaps(op.InvokeNs, op.CompleteNs)
		}):
			acked++
		}
	}
	r.Stats["acked_while_disk_full"] = float64(acked)
	r.Stats["refused_disk_full"] = float64(refused)
}

// checkRefusedUnwritten: a job none of whose submits was anything but a
// refusal that says nothing was written does not exist.
func checkRefusedUnwritten(v *view, r *Result) {
	for _, job := range v.jobs {
		var refusals []int
		reason := ""
		only := true
		for _, i := range v.jobOps[job] {
			op := &v.ops[i]
			if op.Name != history.OpSubmit {
				continue
			}
			if op.Status != history.StatusFail || !unwrittenReasons[op.Reason] {
				only = false
				break
			}
			refusals = append(refusals, op.CompleteIndex)
			reason = op.Reason
		}
		if !only || len(refusals) == 0 {
			continue
		}
		for _, f := range v.finals {
			if _, ok := f.jobs[job]; ok {
				r.add(fmt.Sprintf("node %s: job %s exists, but every submit of it was refused (%s): a refusal that was written",
					f.fs.Node, job, reason), job, 0, append(refusals, f.idx)...)
			}
		}
	}
}
