package checker

import (
	"fmt"
	"sort"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// checkSingleLease (I2): at most one live lease per job in every committed
// state.
//
// Three views of it. Each final state: at most one active lease per job,
// the newest, and the job's current token and state agree with it. Clients'
// observations: a grant or a linearizable read shows a token live at some
// moment within the call; a later call (invoked after the first answered)
// that shows an older token of the job live means the older lease lived on
// beside the newer one, or came back; calls that overlap are not ordered
// and not judged. The event log, when complete, replays every committed
// state in order: a lease.acquired while the job's previous lease has no
// end event is two live leases at once.
func checkSingleLease(v *view, r *Result) {
	checkFinalLeases(v, r)
	checkLiveObservations(v, r)
	if v.eventsComplete() {
		checkEventLeases(v, r)
	} else {
		r.note("event log not complete: committed states not replayed")
	}
}

func checkFinalLeases(v *view, r *Result) {
	for _, f := range v.finals {
		for _, job := range sortedKeys(f.jobs) {
			j := f.jobs[job]
			bad := func(msg string, tok uint64) {
				r.add(fmt.Sprintf("node %s: job %s: %s", f.fs.Node, job, msg), job, tok, f.idx)
			}
			if len(j.Leases) == 0 {
				if j.CurrentToken != 0 && (len(j.Tokens) == 0 || j.CurrentToken != j.Tokens[len(j.Tokens)-1]) {
					bad(fmt.Sprintf("current token %d is not its newest token (%v)", j.CurrentToken, j.Tokens), j.CurrentToken)
				}
				continue
			}
			var active []uint64
			for _, l := range j.Leases {
				if l.State == history.LeaseActive {
					active = append(active, l.Token)
				}
			}
			newest := j.Leases[len(j.Leases)-1].Token
			switch {
			case len(active) > 1:
				bad(fmt.Sprintf("%d active leases %v", len(active), active), active[1])
			case len(active) == 1 && active[0] != newest:
				bad(fmt.Sprintf("active lease %d is not the newest (%d)", active[0], newest), active[0])
			case len(active) == 1 && j.CurrentToken != active[0]:
				bad(fmt.Sprintf("current token %d but lease %d is active", j.CurrentToken, active[0]), active[0])
			case len(active) == 0 && j.CurrentToken != 0:
				bad(fmt.Sprintf("current token %d but no lease is active", j.CurrentToken), j.CurrentToken)
			}
			if (len(active) > 0) != j.State.Leased() {
				bad(fmt.Sprintf("state %s with %d active leases", j.State, len(active)), 0)
			}
		}
	}
}

// liveObs: token was the job's live lease at some moment in [invoke,
// complete].
type liveObs struct {
	token            uint64
	invoke, complete int64
	idx              int
}

func checkLiveObservations(v *view, r *Result) {
	byJob := map[string][]liveObs{}
	for _, job := range v.jobs {
		for _, g := range v.grants[job] {
			if !g.replayed {
				byJob[job] = append(byJob[job], liveObs{g.g.Token, g.invoke, g.complete, v.ops[g.op].CompleteIndex})
			}
		}
	}
	n := 0
	for i := range v.ops {
		op := &v.ops[i]
		if op.Status != history.StatusOK || !v.linearizableRead(op) {
			continue
		}
		job, current := op.Input.JobID, op.Output.CurrentToken
		switch op.Name {
		case history.OpFenceCheck:
			n++
			if op.Output.Current != (current != 0 && current == op.Input.Token) {
				r.add(fmt.Sprintf("fence check of token %d answered current=%v with current token %d",
					op.Input.Token, op.Output.Current, current), job, op.Input.Token, op.CompleteIndex)
			}
		case history.OpGetJob:
			if op.Output.Job == nil {
				continue
			}
			n++
			job, current = op.Output.Job.ID, op.Output.Job.CurrentToken
		default:
			continue
		}
		if current != 0 {
			byJob[job] = append(byJob[job], liveObs{current, op.InvokeNs, op.CompleteNs, op.CompleteIndex})
		}
	}
	r.Stats["reads"] = float64(n)
	for _, job := range sortedKeys(byJob) {
		obs := byJob[job]
		sort.SliceStable(obs, func(a, b int) bool { return obs[a].complete < obs[b].complete })
		best := make([]int, len(obs)) // index of the largest token among obs[:k+1]
		for k := range obs {
			best[k] = k
			if k > 0 && obs[best[k-1]].token > obs[k].token {
				best[k] = best[k-1]
			}
		}
		for _, b := range obs {
			n := sort.Search(len(obs), func(k int) bool { return obs[k].complete >= b.invoke })
			if n == 0 {
				continue
			}
			if a := obs[best[n-1]]; a.token > b.token {
				r.add(fmt.Sprintf("job %s: token %d seen live after token %d had been", job, b.token, a.token),
					job, b.token, a.idx, b.idx)
			}
		}
	}
}

func checkEventLeases(v *view, r *Result) {
	live := map[string]evRef{}
	for _, e := range v.events {
		job := e.ev.JobID
		switch e.ev.Type {
		case history.EventLeaseAcquired:
			if prev, ok := live[job]; ok {
				r.add(fmt.Sprintf("event %d: job %s acquired token %d while token %d was live (event %d)",
					e.ev.Seq, job, e.ev.Token, prev.ev.Token, prev.ev.Seq), job, e.ev.Token, prev.idx, e.idx)
			}
			live[job] = e
		case history.EventLeaseExpired, history.EventLeaseReported, history.EventLeaseReleased:
			if prev, ok := live[job]; ok && prev.ev.Token == e.ev.Token {
				delete(live, job)
			}
		}
	}
}

// eventsComplete reports whether the runner read the whole event log.
func (v *view) eventsComplete() bool { return v.runEnd != nil && v.runEnd.EventsComplete }
