package checker

import (
	"fmt"

	"github.com/leasehold/leasehold/jepsen-lite/history"
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
func checkDurability(v *view, r *Result) {
	if len(v.finals) == 0 {
		r.note("no final states: durability not checked")
		return
	}
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
