package checker

import (
	"fmt"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

// checkReportIdempotency (I6): every answer to one report id is the first
// answer.
//
// All acknowledged reports with one (token, report id) must carry the same
// answer (outcome, job state after it, requeued). One lease takes one
// report: two different report ids both acknowledged on one token means
// the second was not refused as a conflict. And a repeat must never be
// refused: a CONFLICT for the id that was acknowledged, or a STALE_TOKEN
// for the id a final state shows the lease reported with (the lease was
// still kept, so the repeat should have found it).
func checkReportIdempotency(v *view, r *Result) {
	type key struct {
		job   string
		token uint64
		rid   string
	}
	first := map[key]int{}
	ids := map[leaseKey][]string{}
	oks := 0
	for i := range v.ops {
		op := &v.ops[i]
		if op.Name != history.OpReport || op.Status != history.StatusOK {
			continue
		}
		oks++
		k := key{op.Input.JobID, op.Input.Token, op.Input.ReportID}
		j, seen := first[k]
		if !seen {
			first[k] = i
			lk := leaseKey{k.job, k.token}
			if prev := ids[lk]; len(prev) > 0 {
				r.add(fmt.Sprintf("job %s token %d: reports %s and %s both acknowledged; the second should have been a conflict",
					k.job, k.token, prev[0], k.rid), k.job, k.token, v.ops[first[key{k.job, k.token, prev[0]}]].CompleteIndex, op.CompleteIndex)
			}
			ids[lk] = append(ids[lk], k.rid)
			continue
		}
		a, b := &v.ops[j].Output, &op.Output
		if a.Outcome != b.Outcome || a.State != b.State || a.Requeued != b.Requeued {
			r.add(fmt.Sprintf("job %s token %d report %s answered %s/%s/requeued=%v, then %s/%s/requeued=%v",
				k.job, k.token, k.rid, a.Outcome, a.State, a.Requeued, b.Outcome, b.State, b.Requeued),
				k.job, k.token, v.ops[j].CompleteIndex, op.CompleteIndex)
		}
	}
	for i := range v.ops {
		op := &v.ops[i]
		if op.Name != history.OpReport || op.Status != history.StatusFail {
			continue
		}
		k := key{op.Input.JobID, op.Input.Token, op.Input.ReportID}
		switch op.Reason {
		case transport.ReasonConflict:
			if j, ok := first[k]; ok {
				r.add(fmt.Sprintf("job %s token %d: report %s refused as a conflict after it was acknowledged",
					k.job, k.token, k.rid), k.job, k.token, v.ops[j].CompleteIndex, op.CompleteIndex)
			}
		case transport.ReasonStaleToken:
			if f, ok := v.reportedWith(leaseKey{k.job, k.token}, k.rid); ok {
				r.add(fmt.Sprintf("job %s token %d: report %s refused as stale, though the lease is kept reported by it",
					k.job, k.token, k.rid), k.job, k.token, f, op.CompleteIndex)
			}
		}
	}
	r.Stats["reports_acknowledged"] = float64(oks)
	r.Stats["report_ids"] = float64(len(first))
}

// reportedWith finds a final state whose lease k is reported with rid.
func (v *view) reportedWith(k leaseKey, rid string) (int, bool) {
	for _, f := range v.finals {
		if j, ok := f.jobs[k.job]; ok {
			if l, ok := finalLease(j, k.token); ok && l.State == history.LeaseReported && l.ReportID == rid {
				return f.idx, true
			}
		}
	}
	return 0, false
}
