package checker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

// checkOutsider (O1): nobody outside the cluster changed it (SPEC section
// 8: only servers of the cluster, each for its own entry, reach the peer
// port's joins and Raft).
//
// The outsider nemesis attacks the nodes' peer ports from an address that
// is no member's (package outsider) and records every attempt. O1 flags:
//
//   - (a) an attempt that was accepted (answered without an error): any
//     join; in a secure run any Raft message (nothing without a server
//     certificate of the cluster reaches Raft); in any run a Raft message
//     whose term no cluster reaches (transport.MaxRaftValue or more). An
//     in-range Raft message taken by an insecure run's open peer port is
//     what --insecure gives up: noted, not flagged (the outsider sends
//     none there).
//   - (b) a node whose final membership, its Raft configuration with each
//     member's API address from its node table, is not exactly the run's
//     configured nodes, every one a voter at its own addresses.
//   - (c) a node whose final term is MaxRaftValue or more, or more than the
//     run's real time allows: a node starts an election (a new term) at
//     most once per min(heartbeat timeout, election timeout), since raft's
//     randomized timers never fire sooner, across restarts too; a
//     leadership transfer (TimeoutNow) skips the timer once, counted
//     generously. So the highest term is at most the bootstrap's 1, plus
//     per node one election at the start and one per timeout of the run's
//     duration (its first entry to its last final state), plus the
//     transfers. Pre-vote makes real terms far fewer; the bound only has
//     to be impossible to reach honestly, so that a forged term that got
//     in shows.
//   - (d) a connection to the outsider's capture server, whose address
//     only the attacks ever offered as a member's API address.
//
// (b) and (c) hold in every run, with or without the outsider; a history
// without memberships or terms in its final states (an older format) is
// noted, not flagged.
func checkOutsider(v *view, r *Result) {
	secure := v.run != nil && v.run.Secure
	accepted, byAttack := 0, map[string]int{}
	for _, i := range v.attempts {
		a := v.entries[i].Attempt
		byAttack[a.Attack]++
		if !a.Accepted {
			continue
		}
		accepted++
		what := fmt.Sprintf("%s via %s at %s", a.Attack, a.Via, a.Node)
		switch {
		case strings.HasPrefix(a.Attack, "join-"):
			r.add(fmt.Sprintf("outsider %s was accepted: claim %s", what, claimString(a.Claim)), "", 0, i)
		case secure:
			r.add(fmt.Sprintf("outsider %s (term %d) was accepted in a secure run", what, a.Term), "", 0, i)
		case a.Term >= transport.MaxRaftValue:
			r.add(fmt.Sprintf("outsider %s with term %d, out of range, was accepted", what, a.Term), "", 0, i)
		default:
			r.note(fmt.Sprintf("an in-range Raft message (%s) was taken by an open peer port: what an insecure run gives up", a.Attack))
		}
	}
	r.Stats["outsider_attempts"] = float64(len(v.attempts))
	r.Stats["outsider_accepted"] = float64(accepted)
	for k, n := range byAttack {
		r.Stats["attempts_"+k] = float64(n)
	}
	for _, i := range v.captures {
		c := v.entries[i].Capture
		r.add(fmt.Sprintf("the outsider's capture server got a connection from %s (%s): an address an attack offered was used",
			c.From, firstNonEmpty(c.First, "nothing sent")), "", 0, i)
	}
	r.Stats["captured"] = float64(len(v.captures))
	if len(v.attempts) == 0 && slices.ContainsFunc(v.faults, func(f faultSpn) bool { return f.typ == "outsider" }) {
		r.note("the outsider ran but recorded no attempt")
	}
	checkMembership(v, r)
	checkTerms(v, r)
}

func claimString(m *history.Member) string {
	if m == nil {
		return "none"
	}
	return fmt.Sprintf("%s raft=%s api=%s", m.ID, m.RaftAddr, m.APIAddr)
}

// checkMembership: every node ends with the configured membership (b).
func checkMembership(v *view, r *Result) {
	if len(v.finals) == 0 {
		r.note("no final states: membership not checked")
		return
	}
	var want []history.Member
	if v.run != nil {
		want = slices.Clone(v.run.Members)
		slices.SortFunc(want, func(a, b history.Member) int { return strings.Compare(a.ID, b.ID) })
	}
	membersString := func(ms []history.Member) string {
		var parts []string
		for _, m := range ms {
			p := fmt.Sprintf("%s raft=%s api=%s", m.ID, m.RaftAddr, m.APIAddr)
			if !m.Voter {
				p += " (not a voter)"
			}
			parts = append(parts, p)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	for _, f := range v.finals {
		got := f.fs.Members
		switch {
		case got == nil:
			r.note(fmt.Sprintf("node %s's final state has no membership: not checked", f.fs.Node))
		case len(want) > 0:
			if !slices.Equal(got, want) {
				r.add(fmt.Sprintf("node %s ends with members %s, not the configured %s", f.fs.Node, membersString(got), membersString(want)), "", 0, f.idx)
			}
		case v.run != nil && len(v.run.Nodes) > 0:
			// Only the node names are known: compare ids.
			var ids []string
			for _, m := range got {
				ids = append(ids, m.ID)
			}
			if !slices.Equal(ids, slices.Sorted(slices.Values(v.run.Nodes))) {
				r.add(fmt.Sprintf("node %s ends with members %s, not the run's nodes %v", f.fs.Node, membersString(got), v.run.Nodes), "", 0, f.idx)
			}
		default:
			r.note("the run names no nodes: membership not checked")
			return
		}
	}
}

// transferAllowance is how many elections one leadership transfer may
// start out of turn (the client retries a transfer that failed).
const transferAllowance = 10

// checkTerms: no node's term is beyond what the run could reach (c).
func checkTerms(v *view, r *Result) {
	if len(v.finals) == 0 {
		return
	}
	bound, why := termBound(v)
	if bound > 0 {
		r.Stats["term_bound"] = float64(bound)
	}
	var highest uint64
	for _, f := range v.finals {
		t := f.fs.Term
		highest = max(highest, t)
		switch {
		case t >= transport.MaxRaftValue:
			r.add(fmt.Sprintf("node %s ends at term %d, which no cluster reaches (a forged term got in)", f.fs.Node, t), "", 0, f.idx)
		case bound > 0 && t > bound:
			r.add(fmt.Sprintf("node %s ends at term %d, beyond the %d the run allows (%s)", f.fs.Node, t, bound, why), "", 0, f.idx)
		}
	}
	r.Stats["max_term"] = float64(highest)
	if highest == 0 {
		r.note("the final states carry no terms: terms not checked")
	}
	changes := 0
	for _, e := range v.events {
		if e.ev.Type == history.EventLeaderChanged {
			changes++
		}
	}
	r.Stats["leader_changes"] = float64(changes)
}

// termBound is the highest term the run's real time allows (see
// checkOutsider), and how it was reached; 0 when the history lacks the
// timings.
func termBound(v *view) (uint64, string) {
	if v.run == nil {
		return 0, ""
	}
	timeout := v.run.ElectionTimeoutNs
	if ht := v.run.HeartbeatTimeoutNs; ht > 0 && (timeout <= 0 || ht < timeout) {
		timeout = ht
	}
	var runAt int64
	for i := range v.entries {
		if v.entries[i].Kind == history.KindRun {
			runAt = v.entries[i].Ns
			break
		}
	}
	var end int64
	for _, f := range v.finals {
		end = max(end, v.entries[f.idx].Ns)
	}
	if timeout <= 0 || runAt == 0 || end <= runAt {
		return 0, ""
	}
	nodes := max(len(v.run.Nodes), len(v.finals))
	transfers := 0
	for _, f := range v.faults {
		if f.typ == "transfer" {
			transfers++
		}
	}
	perNode := uint64(1 + (end-runAt+timeout-1)/timeout)
	bound := 1 + uint64(nodes)*perNode + uint64(transferAllowance*transfers)
	return bound, fmt.Sprintf("%d nodes × %d elections in %s at one per %s, %d transfers",
		nodes, perNode, fmtMs(end-runAt), fmtMs(timeout), transfers)
}
