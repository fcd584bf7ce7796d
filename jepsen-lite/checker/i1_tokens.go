package checker

import (
	"fmt"
	"slices"
	"sort"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// checkTokens (I1): per-job tokens strictly increase and no token is
// granted twice.
//
// The final states are the authority on which tokens each job had: every
// list must strictly increase, no token may sit in two jobs (in one node's
// state or across nodes), and every token an acquire was acknowledged for
// must be in its job's list. Acquire answers are checked among themselves
// too: one token for one (job, worker, request), and a grant invoked after
// another grant of the same job completed must carry a larger token.
// Concurrent grants are not ordered, since either may have committed first.
// The event log, when collected, must show lease.acquired tokens rising
// with the sequence number, as every grant in the cluster takes the next.
func checkTokens(v *view, r *Result) {
	checkGrantOwners(v, r)
	checkGrantOrder(v, r)
	checkFinalTokenLists(v, r)
	checkGrantsInFinals(v, r)
	checkEventTokens(v, r)
}

func checkGrantOwners(v *view, r *Result) {
	type owner struct {
		job, worker, request string
		complete             int
	}
	owners := map[uint64]owner{}
	n := 0
	for _, job := range v.jobs {
		for _, g := range v.grants[job] {
			n++
			op := &v.ops[g.op]
			o := owner{job, g.g.WorkerID, firstNonEmpty(g.g.RequestID, op.Input.RequestID), op.CompleteIndex}
			prev, seen := owners[g.g.Token]
			switch {
			case !seen:
				owners[g.g.Token] = o
			case prev.job != o.job:
				r.add(fmt.Sprintf("token %d granted to job %s and to job %s", g.g.Token, prev.job, o.job),
					job, g.g.Token, prev.complete, o.complete)
			case prev.worker != "" && o.worker != "" && prev.worker != o.worker,
				prev.request != "" && o.request != "" && prev.request != o.request:
				r.add(fmt.Sprintf("token %d granted twice: to %s (request %s) and to %s (request %s)",
					g.g.Token, prev.worker, prev.request, o.worker, o.request), job, g.g.Token, prev.complete, o.complete)
			}
		}
	}
	r.Stats["grants"] = float64(n)
}

// checkGrantOrder: a fresh grant that began after another grant of the job
// had been answered came later in the log, so its token is larger.
func checkGrantOrder(v *view, r *Result) {
	for _, job := range v.jobs {
		var fresh []grantRef
		for _, g := range v.grants[job] {
			if !g.replayed {
				fresh = append(fresh, g)
			}
		}
		sort.SliceStable(fresh, func(a, b int) bool { return fresh[a].complete < fresh[b].complete })
		// best[k] is the grant with the largest token among fresh[:k+1].
		best := make([]int, len(fresh))
		for k := range fresh {
			best[k] = k
			if k > 0 && fresh[best[k-1]].g.Token > fresh[k].g.Token {
				best[k] = best[k-1]
			}
		}
		for _, b := range fresh {
			n := sort.Search(len(fresh), func(k int) bool { return fresh[k].complete >= b.invoke })
			if n == 0 {
				continue
			}
			a := fresh[best[n-1]]
			if a.g.Token >= b.g.Token {
				r.add(fmt.Sprintf("job %s: token %d granted after token %d had been granted", job, b.g.Token, a.g.Token),
					job, b.g.Token, v.ops[a.op].CompleteIndex, v.ops[b.op].CompleteIndex)
			}
		}
	}
}

func checkFinalTokenLists(v *view, r *Result) {
	type place struct {
		job, node string
		idx       int
	}
	across := map[uint64]place{}
	for _, f := range v.finals {
		within := map[uint64]string{}
		var max uint64
		for _, job := range sortedKeys(f.jobs) {
			j := f.jobs[job]
			for k, tok := range j.Tokens {
				if k > 0 && tok <= j.Tokens[k-1] {
					r.add(fmt.Sprintf("node %s: job %s tokens do not strictly increase: %v", f.fs.Node, job, j.Tokens),
						job, tok, f.idx)
					break
				}
			}
			if len(j.Leases) > 0 && !slices.Equal(leaseTokens(j.Leases), j.Tokens) {
				r.add(fmt.Sprintf("node %s: job %s leases %v disagree with tokens %v", f.fs.Node, job, leaseTokens(j.Leases), j.Tokens),
					job, 0, f.idx)
			}
			for _, tok := range j.Tokens {
				max = maxU(max, tok)
				if other, ok := within[tok]; ok && other != job {
					r.add(fmt.Sprintf("node %s: token %d belongs to job %s and job %s", f.fs.Node, tok, other, job), job, tok, f.idx)
				}
				within[tok] = job
				if p, ok := across[tok]; !ok {
					across[tok] = place{job, f.fs.Node, f.idx}
				} else if p.job != job && p.node != f.fs.Node {
					r.add(fmt.Sprintf("token %d belongs to job %s on node %s and job %s on node %s", tok, p.job, p.node, job, f.fs.Node),
						job, tok, p.idx, f.idx)
				}
			}
		}
		if f.fs.LastToken != 0 && max > f.fs.LastToken {
			r.add(fmt.Sprintf("node %s: token %d above the counter %d", f.fs.Node, max, f.fs.LastToken), "", max, f.idx)
		}
	}
	r.Stats["final_tokens"] = float64(len(across))
}

// checkGrantsInFinals: an acknowledged grant is in its job's token list on
// every node, exactly once (the list strictly increases).
func checkGrantsInFinals(v *view, r *Result) {
	if len(v.finals) == 0 {
		r.note("no final states: grants not checked against them")
		return
	}
	compacted, beyond := 0, 0
	for _, f := range v.finals {
		for _, job := range v.jobs {
			gs := v.grants[job]
			if len(gs) == 0 {
				continue
			}
			j, ok := f.jobs[job]
			if !ok {
				switch {
				case !f.fs.Complete:
					r.note("a final state does not list every job: missing jobs not judged")
				case v.opts.AllowCompacted:
					compacted++
				default:
					r.add(fmt.Sprintf("node %s: job %s, granted token %d, is missing", f.fs.Node, job, gs[0].g.Token),
						job, gs[0].g.Token, f.idx, v.ops[gs[0].op].CompleteIndex)
				}
				continue
			}
			for _, g := range gs {
				if slices.Contains(j.Tokens, g.g.Token) {
					continue
				}
				if v.trimmed(j, g.g.Token) {
					beyond++
					continue
				}
				r.add(fmt.Sprintf("node %s: job %s has no token %d, though it was granted", f.fs.Node, job, g.g.Token),
					job, g.g.Token, f.idx, v.ops[g.op].CompleteIndex)
			}
		}
	}
	r.Stats["jobs_compacted"] = float64(compacted)
	r.Stats["grants_beyond_lease_history"] = float64(beyond)
}

func checkEventTokens(v *view, r *Result) {
	var last uint64
	lastIdx := -1
	for _, e := range v.events {
		if e.ev.Type != history.EventLeaseAcquired {
			continue
		}
		if e.ev.Token <= last {
			r.add(fmt.Sprintf("event %d: lease.acquired token %d after token %d", e.ev.Seq, e.ev.Token, last),
				e.ev.JobID, e.ev.Token, lastIdx, e.idx)
		}
		last, lastIdx = e.ev.Token, e.idx
	}
}

func leaseTokens(ls []history.Lease) []uint64 {
	out := make([]uint64, len(ls))
	for i, l := range ls {
		out[i] = l.Token
	}
	return out
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
