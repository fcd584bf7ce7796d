package checker

import "github.com/leasehold/leasehold/jepsen-lite/history"

// A lease never comes back to life: once a token is not its job's live
// lease, it never will be again. So any observation that a token had ended
// (a later token granted, a report or release acknowledged, an expiry seen,
// a linearizable read naming another current token) dates its end from
// above, and any action with that token invoked afterwards acted on a stale
// token. This file collects those observations per job.

// evSource says where an observation came from, so a checker can trust
// only the kinds that bind its subject.
type evSource uint8

const (
	fromOp    evSource = 1 << iota // an acknowledged write's answer
	fromRead                       // a linearizable read's answer
	fromEvent                      // the cluster's event log
	fromSink                       // the fenced sink accepting a newer token
	fromAny   = fromOp | fromRead | fromEvent | fromSink
)

// evidence is one observation that some tokens had ended by ns.
type evidence struct {
	ns  int64
	idx int
	src evSource
	why string
	// Which tokens it ends: every token below `below`; exactly `token`;
	// or, for a read that found `except` (maybe none) current, every
	// other token already known granted when the read was invoked.
	below   uint64
	token   uint64
	notLive bool
	invoke  int64
	except  uint64
}

func (v *view) buildEvidence() {
	v.evidence = map[string][]evidence{}
	known := map[leaseKey]int64{}
	know := func(job string, tok uint64, ns int64) {
		k := leaseKey{job, tok}
		if t, ok := known[k]; tok != 0 && (!ok || ns < t) {
			known[k] = ns
		}
	}
	add := func(job string, e evidence) { v.evidence[job] = append(v.evidence[job], e) }

	// Jobs in order, so ties between observations resolve the same way on
	// every run and the report is reproducible.
	for _, job := range v.jobs {
		for _, g := range v.grants[job] {
			know(job, g.g.Token, g.complete)
			add(job, evidence{ns: g.complete, idx: v.ops[g.op].CompleteIndex, src: fromOp,
				why: "a later token was granted", below: g.g.Token})
		}
	}
	for i := range v.ops {
		op := &v.ops[i]
		if op.Status != history.StatusOK {
			continue
		}
		in := &op.Input
		switch {
		case op.Name == history.OpReport || op.Name == history.OpRelease:
			know(in.JobID, in.Token, op.CompleteNs)
			why := "the lease was reported"
			if op.Name == history.OpRelease {
				why = "the lease was released"
			}
			add(in.JobID, evidence{ns: op.CompleteNs, idx: op.CompleteIndex, src: fromOp, why: why, token: in.Token})
		case op.Name == history.OpStart:
			know(in.JobID, in.Token, op.CompleteNs)
		case op.Name == history.OpDeregister:
			for _, l := range op.Output.Released {
				add(l.JobID, evidence{ns: op.CompleteNs, idx: op.CompleteIndex, src: fromOp,
					why: "its worker was deregistered", token: l.Token})
			}
		case v.linearizableRead(op):
			v.readEvidence(op, know, add)
		}
	}
	for _, e := range v.events {
		switch e.ev.Type {
		case history.EventLeaseAcquired:
			know(e.ev.JobID, e.ev.Token, e.ns)
			add(e.ev.JobID, evidence{ns: e.ns, idx: e.idx, src: fromEvent,
				why: "a later lease.acquired event", below: e.ev.Token})
		case history.EventLeaseExpired, history.EventLeaseReported, history.EventLeaseReleased:
			add(e.ev.JobID, evidence{ns: e.ns, idx: e.idx, src: fromEvent, why: "a " + e.ev.Type + " event", token: e.ev.Token})
		}
	}
	for _, x := range v.execs {
		know(x.job, x.token, x.start)
	}
	for _, i := range v.sinks {
		s := v.entries[i].Sink
		if s.Sink == history.SinkFenced && s.Accepted {
			add(s.JobID, evidence{ns: v.entries[i].Ns, idx: i, src: fromSink,
				why: "the fenced sink accepted a later token", below: s.Token})
		}
	}
	// notLive evidence is matched against these times in endedAt, once
	// every observation is in.
	v.known = known
}

// readEvidence turns one linearizable read's answer into observations.
func (v *view) readEvidence(op *history.Operation, know func(string, uint64, int64), add func(string, evidence)) {
	var job string
	var current uint64
	var leases []history.Lease
	switch op.Name {
	case history.OpFenceCheck:
		job, current = op.Input.JobID, op.Output.CurrentToken
	case history.OpGetJob:
		j := op.Output.Job
		if j == nil {
			return
		}
		job, current, leases = j.ID, j.CurrentToken, j.Leases
	case history.OpGetLease:
		// A single lease read says nothing about the job's other leases:
		// it dates only this lease.
		l := op.Output.Lease
		if l == nil || op.Input.JobID == "" {
			return
		}
		know(op.Input.JobID, l.Token, op.CompleteNs)
		if l.State != history.LeaseActive {
			add(op.Input.JobID, evidence{ns: op.CompleteNs, idx: op.CompleteIndex, src: fromRead,
				why: "a read found the lease " + string(l.State), token: l.Token})
		}
		return
	}
	if job == "" {
		return
	}
	if current != 0 {
		know(job, current, op.CompleteNs)
		add(job, evidence{ns: op.CompleteNs, idx: op.CompleteIndex, src: fromRead,
			why: "a read found a later token current", below: current})
	}
	add(job, evidence{ns: op.CompleteNs, idx: op.CompleteIndex, src: fromRead,
		why: "a read found another token (or none) current", notLive: true, invoke: op.InvokeNs, except: current})
	for _, l := range leases {
		know(job, l.Token, op.CompleteNs)
		if l.State != history.LeaseActive {
			add(job, evidence{ns: op.CompleteNs, idx: op.CompleteIndex, src: fromRead,
				why: "a read found the lease " + string(l.State), token: l.Token})
		}
	}
}

// grantKnown is the earliest time token is known to have been granted,
// never if it is not.
func (v *view) grantKnown(job string, tok uint64) int64 {
	if t, ok := v.known[leaseKey{job, tok}]; ok {
		return t
	}
	return never
}

// endedAt is the earliest time, by observations from srcs, that token was
// known not to be job's live lease: never if nothing says so. It also
// returns the observation's entry index and what it was.
func (v *view) endedAt(job string, tok uint64, srcs evSource) (int64, int, string) {
	best, idx, why := never, -1, ""
	granted := v.grantKnown(job, tok)
	for _, e := range v.evidence[job] {
		if e.src&srcs == 0 || e.ns >= best {
			continue
		}
		ends := false
		switch {
		case e.below != 0:
			ends = tok < e.below
		case e.notLive:
			ends = tok != e.except && granted <= e.invoke
		default:
			ends = tok == e.token
		}
		if ends {
			best, idx, why = e.ns, e.idx, e.why
		}
	}
	return best, idx, why
}
