package checker

import (
	"fmt"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// checkCompleteOnce (I9): each job completes at most once, and every job
// finishes after the faults heal.
//
// A report whose answer leaves the job reported (not requeued) completes
// it. At most one token per job may be acknowledged that way, and no fresh
// grant of the job may be invoked after such an answer. With
// Options.RequireAllFinished, every job whose submit was acknowledged must
// be terminal in every final state that lists it.
func checkCompleteOnce(v *view, r *Result) {
	completed := 0
	for _, job := range v.jobs {
		var tokens []uint64
		var firstDone *history.Operation
		for _, i := range v.jobOps[job] {
			op := &v.ops[i]
			if op.Name != history.OpReport || op.Status != history.StatusOK || op.Output.State != history.JobReported {
				continue
			}
			if !containsU(tokens, op.Input.Token) {
				tokens = append(tokens, op.Input.Token)
				if len(tokens) == 2 {
					r.add(fmt.Sprintf("job %s completed twice: tokens %d and %d", job, tokens[0], tokens[1]),
						job, tokens[1], firstDone.CompleteIndex, op.CompleteIndex)
				}
			}
			if firstDone == nil || op.CompleteNs < firstDone.CompleteNs {
				firstDone = op
			}
		}
		if firstDone == nil {
			continue
		}
		completed++
		for _, g := range v.grants[job] {
			if !g.replayed && g.invoke > firstDone.CompleteNs {
				r.add(fmt.Sprintf("job %s leased again (token %d) after it completed with token %d", job, g.g.Token, firstDone.Input.Token),
					job, g.g.Token, firstDone.CompleteIndex, v.ops[g.op].CompleteIndex)
			}
		}
	}
	r.Stats["jobs_completed"] = float64(completed)
	if !v.opts.RequireAllFinished {
		return
	}
	if len(v.finals) == 0 {
		r.note("no final states: unfinished jobs not checked")
		return
	}
	unfinished := 0
	for i := range v.ops {
		op := &v.ops[i]
		if op.Name != history.OpSubmit || op.Status != history.StatusOK {
			continue
		}
		for _, f := range v.finals {
			if j, ok := f.jobs[op.Input.JobID]; ok && !j.State.Terminal() {
				unfinished++
				r.add(fmt.Sprintf("node %s: job %s is still %s after the run", f.fs.Node, j.ID, j.State),
					j.ID, j.CurrentToken, op.CompleteIndex, f.idx)
			}
		}
	}
	r.Stats["jobs_unfinished"] = float64(unfinished)
}
