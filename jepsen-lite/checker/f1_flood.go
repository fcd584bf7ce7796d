package checker

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

// checkFlood (F1): a flood of bad calls was refused, and nothing real was
// pushed out of the event log (SPEC section 8: nothing is read before it
// is allowed, and everything is bounded).
//
// The flood (workload.Flood) calls every node from an address of its own
// beside the real load and records every call. F1 flags:
//
//   - (a) a flood call answered 2xx: a gzip bomb or an oversized body
//     taken, a connection that never sent its body answered as if it had,
//     a ghost worker's heartbeat or acquire served, a wrong token let in,
//     an admin call allowed to a non-admin token, a worker's credential
//     acting in another worker's name.
//   - (b) an event the run saw that a node's final event log no longer
//     holds: every node's log must start at or before the first seq the
//     run's event watch saw (it reads from seq 0), hold every seq from its
//     first to its last, end at or after the last seq the watch saw, and
//     still hold every lease.stale_report the watch saw (I5's record of a
//     refused stale report). This holds in every run, flood or not. What
//     the watch saw beyond the final states' cut (FinalState.CutEventSeq)
//     was made after they were read, and is not asked of them.
//   - (c) an event naming one of the flood's made-up workers: ghosts are
//     never timed, so they never become unreachable or anything else.
//   - (d) more audit events from the flood's address than the refusals'
//     rate allows: at most refusalRate a second, after a burst of
//     refusalBurst, per node (each node limits its own), over the flood's
//     span plus refusalWindow for records still queued at its end.
//
// Refusals with another reason than the attack's (a gzip bomb refused
// UNAVAILABLE while its node was down, say) are counted by reason and
// noted, not flagged: a refusal changes nothing.
func checkFlood(v *view, r *Result) {
	checkEventsKept(v, r)
	source := ""
	if v.run != nil {
		source = v.run.FloodSource
	}
	if len(v.floods) == 0 {
		if source != "" {
			r.note("the run had a flood, but it recorded no call")
		}
		return
	}
	checkFloodCalls(v, r)
	checkGhostEvents(v, r)
	checkFloodAudits(v, r, source)
}

// The product's bounds on audit records of refusals (cluster/audit.go,
// docs/security.md "Audit"): one per source host, identity and call every
// refusalWindow, and refusalRate a second after a burst of refusalBurst,
// per node.
const (
	refusalRate   = 5
	refusalBurst  = 4 * refusalRate
	refusalWindow = 10 * time.Second
)

// transientReasons are answers any call may get while the cluster is
// broken or busy: they say "not now".
var transientReasons = map[string]bool{
	transport.ReasonNotLeader: true, transport.ReasonNoLeader: true, transport.ReasonNotReady: true,
	transport.ReasonShuttingDown: true, transport.ReasonTimeout: true, transport.ReasonOutcomeUnknown: true,
	transport.ReasonDiskFull: true, transport.ReasonRateLimited: true,
}

// expectedReason is what a correct node answers an attack with that
// credential ("" when anything refused will do).
func expectedReason(c *history.FloodCall, secure bool) string {
	if secure && c.Cred != history.CredValid {
		return transport.ReasonUnauthenticated
	}
	switch c.Attack {
	case history.FloodGzipBomb, history.FloodOversizedDeclared, history.FloodOversizedStreamed:
		return transport.ReasonTooLarge
	case history.FloodGhostHeartbeat, history.FloodGhostAcquire:
		return transport.ReasonUnknownWorker
	case history.FloodAdminCall, history.FloodImpersonate:
		return transport.ReasonForbidden
	}
	return ""
}

// checkFloodCalls: no flood call was served (a).
func checkFloodCalls(v *view, r *Result) {
	secure := v.run != nil && v.run.Secure
	served, noAnswer := 0, 0
	var heldMax int64
	unexpected := map[string]int{}
	for _, i := range v.floods {
		c := v.entries[i].Flood
		r.Stats["calls_"+c.Attack]++
		if c.Attack == history.FloodIdleConn {
			heldMax = max(heldMax, c.HeldNs)
		}
		switch {
		case c.Served:
			served++
			r.add(fmt.Sprintf("flood %s (credential %s) at %s was served: HTTP %d", c.Attack, c.Cred, c.Node, c.Status), "", 0, i)
		case c.Reason == "" && c.Status == 0:
			noAnswer++
		default:
			want := expectedReason(c, secure)
			if want != "" && c.Reason != want && !transientReasons[c.Reason] {
				unexpected[fmt.Sprintf("%s (credential %s) refused %s, not %s", c.Attack, c.Cred, firstNonEmpty(c.Reason, fmt.Sprint("HTTP ", c.Status)), want)]++
			}
			if c.Reason != "" {
				r.Stats["reason_"+c.Reason]++
			}
		}
	}
	for _, k := range sortedKeys(unexpected) {
		r.note(fmt.Sprintf("%d × %s", unexpected[k], k))
	}
	r.Stats["flood_calls"] = float64(len(v.floods))
	r.Stats["flood_served"] = float64(served)
	r.Stats["flood_no_answer"] = float64(noAnswer)
	if heldMax > 0 {
		r.Stats["idle_held_max_ms"] = ms(heldMax)
	}
}

// checkEventsKept: every node's final event log still holds what the run
// saw (b).
func checkEventsKept(v *view, r *Result) {
	if len(v.finals) == 0 {
		return
	}
	if len(v.events) == 0 {
		r.note("the run saw no event: eviction not checked")
		return
	}
	seenFirst, seenLast := v.events[0].ev.Seq, v.events[len(v.events)-1].ev.Seq
	var stale []evRef
	for _, e := range v.events {
		if e.ev.Type == history.EventStaleReport {
			stale = append(stale, e)
		}
	}
	r.Stats["watch_first_seq"] = float64(seenFirst)
	r.Stats["watch_last_seq"] = float64(seenLast)
	for fi, f := range v.finals {
		log := f.fs.Events
		if log == nil {
			r.note(fmt.Sprintf("node %s's final state has no event log: eviction not checked", f.fs.Node))
			continue
		}
		if fi == 0 {
			for typ, n := range log.ByType {
				r.Stats["final_events_"+typ] = float64(n)
			}
			r.Stats["final_events"] = float64(log.Count)
			r.Stats["final_first_seq"] = float64(log.FirstSeq)
		}
		if log.FirstSeq == 0 || log.FirstSeq > seenFirst {
			var evicted []int
			types := map[string]int{}
			for _, e := range v.events {
				if log.FirstSeq != 0 && e.ev.Seq >= log.FirstSeq {
					break
				}
				evicted = append(evicted, e.idx)
				types[e.ev.Type]++
			}
			r.add(fmt.Sprintf("node %s's event log starts at seq %d: %d events the run saw from seq %d were evicted (%s)",
				f.fs.Node, log.FirstSeq, len(evicted), seenFirst, typeCounts(types)), "", 0, append(firstN(evicted, 10), f.idx)...)
		}
		if log.Count > 0 && uint64(log.Count) != log.LastSeq-log.FirstSeq+1 {
			r.add(fmt.Sprintf("node %s's event log holds %d events from seq %d to %d: %d are missing in between",
				f.fs.Node, log.Count, log.FirstSeq, log.LastSeq, int(log.LastSeq-log.FirstSeq+1)-log.Count), "", 0, f.idx)
		}
		// Only what was made before the final states were read can be
		// asked of them.
		last := seenLast
		if cut := f.fs.CutEventSeq; cut != 0 && cut < last {
			last = cut
			if fi == 0 {
				r.Stats["watch_events_after_cut"] = float64(seenLast - cut)
			}
		}
		if log.LastSeq < last {
			r.add(fmt.Sprintf("node %s's event log ends at seq %d, before seq %d the run saw", f.fs.Node, log.LastSeq, last), "", 0, f.idx)
		}
		for _, e := range stale {
			if e.ev.Seq <= last && !slices.Contains(log.StaleReports, e.ev.Seq) {
				r.add(fmt.Sprintf("node %s's event log no longer holds the stale report of job %s token %d (seq %d)",
					f.fs.Node, e.ev.JobID, e.ev.Token, e.ev.Seq), e.ev.JobID, e.ev.Token, e.idx, f.idx)
			}
		}
	}
	r.Stats["stale_reports_seen"] = float64(len(stale))
}

// checkGhostEvents: no event names a ghost worker (c).
func checkGhostEvents(v *view, r *Result) {
	for _, e := range v.events {
		if strings.HasPrefix(e.ev.WorkerID, history.FloodGhostPrefix) {
			r.add(fmt.Sprintf("event %s (seq %d) names the flood's made-up worker %s", e.ev.Type, e.ev.Seq, e.ev.WorkerID), "", 0, e.idx)
		}
	}
}

// checkFloodAudits: the audit events the flood caused stay within the
// refusals' rate (d).
func checkFloodAudits(v *view, r *Result, source string) {
	if source == "" {
		r.note("the run does not name the flood's address: its audit events not counted")
		return
	}
	first, last := never, int64(0)
	for _, i := range v.floods {
		first, last = min(first, v.entries[i].Ns), max(last, v.entries[i].Ns)
	}
	audits := 0
	actions := map[string]int{}
	for _, e := range v.events {
		if e.ev.Type != history.EventAudit {
			continue
		}
		host, _, err := net.SplitHostPort(e.ev.Source)
		if err != nil {
			host = e.ev.Source
		}
		if host != source {
			continue
		}
		audits++
		action, _, _ := strings.Cut(e.ev.Detail, ":")
		actions[action]++
	}
	nodes := len(v.finals)
	if v.run != nil {
		nodes = max(nodes, len(v.run.Nodes))
	}
	span := time.Duration(last-first) + refusalWindow
	bound := nodes * (int(span.Seconds()*refusalRate) + refusalBurst)
	r.Stats["audit_events_flood"] = float64(audits)
	r.Stats["audit_bound"] = float64(bound)
	r.Stats["audit_per_s"] = float64(audits) / span.Seconds()
	for a, n := range actions {
		r.Stats["audit_"+a] = float64(n)
	}
	if audits > bound {
		r.add(fmt.Sprintf("the flood caused %d audit events (%s) in %s, over the %d that %d nodes record at %d/s after a burst of %d",
			audits, typeCounts(actions), span.Round(time.Second), bound, nodes, refusalRate, refusalBurst), "", 0)
	}
}

func typeCounts(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

func firstN(xs []int, n int) []int {
	if len(xs) > n {
		return xs[:n]
	}
	return xs
}
