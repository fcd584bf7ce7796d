package checker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// checkConvergence (I8): all nodes converge to one state.
//
// The final states (the last one recorded per node) must agree on the
// applied index, the last token, the runner's state hash when it gave one,
// and the content: history.HashJobs over each node's job listing, when
// every listing is complete. Agreement is judged at the moment each node
// was read, so the runner must wait for the nodes to reach one applied
// index before reading them; a lagging follower shows up here. A node
// named in the run entry without a final state is noted, not flagged (it
// may have been removed on purpose).
func checkConvergence(v *view, r *Result) {
	r.Stats["nodes"] = float64(len(v.finals))
	if v.run != nil {
		for _, n := range v.run.Nodes {
			if !slices.ContainsFunc(v.finals, func(f final) bool { return f.fs.Node == n }) {
				r.note(fmt.Sprintf("node %s has no final state", n))
			}
		}
	}
	if len(v.finals) < 2 {
		r.note("fewer than two final states: nothing to compare")
		return
	}
	all := make([]int, len(v.finals))
	complete := true
	for i, f := range v.finals {
		all[i] = f.idx
		complete = complete && f.fs.Complete
	}
	differ := func(what string, value func(f final) string) {
		var parts []string
		seen := map[string]bool{}
		for _, f := range v.finals {
			val := value(f)
			seen[val] = true
			parts = append(parts, f.fs.Node+"="+val)
		}
		if len(seen) > 1 {
			r.add(fmt.Sprintf("nodes disagree on %s: %s", what, strings.Join(parts, " ")), "", 0, all...)
		}
	}
	differ("applied index", func(f final) string { return fmt.Sprint(f.fs.AppliedIndex) })
	differ("last token", func(f final) string { return fmt.Sprint(f.fs.LastToken) })
	if !slices.ContainsFunc(v.finals, func(f final) bool { return f.fs.StateHash == "" }) {
		differ("state hash", func(f final) string { return f.fs.StateHash })
	}
	if !complete {
		r.note("a final state does not list every job: contents not compared")
		return
	}
	differ("job contents (history.HashJobs)", func(f final) string {
		return history.HashJobs(f.fs.LastToken, f.fs.Jobs)[:12]
	})
	if len(r.Violations) > 0 {
		r.Violations = append(r.Violations, firstJobDifference(v)...)
	}
}

// firstJobDifference names the first job whose summary differs between
// nodes, to start the search for the divergence.
func firstJobDifference(v *view) []Violation {
	ids := map[string]bool{}
	for _, f := range v.finals {
		for id := range f.jobs {
			ids[id] = true
		}
	}
	for _, id := range sortedKeys(ids) {
		ref := v.finals[0]
		want := summaryHash(ref, id)
		for _, f := range v.finals[1:] {
			if got := summaryHash(f, id); got != want {
				return []Violation{{
					Msg:   fmt.Sprintf("job %s first differs: node %s has %s, node %s has %s", id, ref.fs.Node, want, f.fs.Node, got),
					JobID: id, Entries: []int{ref.idx, f.idx},
				}}
			}
		}
	}
	return nil
}

func summaryHash(f final, id string) string {
	j, ok := f.jobs[id]
	if !ok {
		return "nothing"
	}
	return fmt.Sprintf("%s with tokens %v (hash %s)", j.State, j.Tokens, history.HashJobs(0, []history.JobSummary{*j})[:12])
}
