package bench

import (
	"context"
	"slices"
	"time"
)

// runFailover runs job cycles and held leases heartbeated on schedule, and
// kills the leader with SIGKILL KillAfter into the window. It reports how
// long writes stopped, and checks what must not happen: a lease expired
// although its worker's heartbeats kept being acknowledged (the new leader
// must restart every lease's clock at its takeover, SPEC section 4).
func runFailover(ctx context.Context, e *env) (*Result, error) {
	lc := e.cfg.Cluster
	hl, err := e.heldLoad(ctx)
	if err != nil {
		return nil, err
	}
	defer hl.stop()
	held, x, w, cy := hl.held, hl.x, hl.w, hl.cy
	cy.writes = &writeLog{}

	var k kill
	during := func(ctx context.Context, from, to time.Time) {
		if !sleepUntil(ctx, from.Add(e.cfg.KillAfter)) {
			return
		}
		k = e.killLeader(ctx, lc)
	}
	p, win, err := e.measure(ctx, cy.callers(), hooks{afterWarmup: cy.topUp, held: held, during: during})
	if err != nil {
		return nil, err
	}
	if k.err != nil {
		return nil, k.err
	}
	held.stop()

	cy.writes.mu.Lock()
	writes := slices.Clone(cy.writes.times)
	cy.writes.mu.Unlock()
	recovery, gap := writeGaps(writes, k, p.start, p.end, p.done)

	// An expiry of a lease whose worker had a heartbeat acknowledged less
	// than toleration before it: the server ended a lease it had heard.
	exp := x.snapshot()
	violations := 0
	for _, ex := range exp {
		if a := ex.worker.lastAck(ex.event); !a.IsZero() && ex.event.Sub(a) < e.timings.toleration {
			violations++
		}
	}

	r := e.result(p, win, cy.cmdsPerCycle())
	r.add("cycles_total", cy.total.Load())
	r.add("killed", leaderName(k.node))
	r.add("new_leader", leaderName(k.newLeader))
	r.add("kill_at_s", num(k.at.Sub(p.start).Seconds(), 3))
	r.add("election_ms", k.elected)
	if recovery < 0 {
		r.add("recovery_ms", "NA")
	} else {
		r.add("recovery_ms", recovery)
	}
	r.add("write_gap_max_ms", gap)
	r.add("expired_while_heartbeating", violations)
	r.add("fenced", cy.fenced.Load())
	addHeld(r, held, exp)
	r.add("events_truncated", w.isTruncated())
	return r, nil
}

// writeGaps reads the acknowledged writes' times: recovery is from the kill
// to the first write acknowledged after the old leader was reaped (-1 if
// none was), and gap the longest silence that began inside the window
// [start, end): from start or a write in the window to the next write, even
// one acknowledged after end (an op started in the window and still
// counted), or to done, when the last op ended, if no write followed. A
// silence that outlasts the window is thus measured whole.
func writeGaps(writes []time.Time, k kill, start, end, done time.Time) (recovery, gap time.Duration) {
	writes = slices.Clone(writes)
	slices.SortFunc(writes, time.Time.Compare)
	recovery = -1
	prev := start
	open := true // prev is inside the window: the silence after it counts
	for _, t := range writes {
		if recovery < 0 && t.After(k.reaped) {
			recovery = t.Sub(k.at)
		}
		if t.Before(start) {
			continue
		}
		if open {
			gap = max(gap, t.Sub(prev))
		}
		prev, open = t, t.Before(end)
	}
	if open {
		gap = max(gap, maxTime(done, end).Sub(prev))
	}
	return recovery, gap
}

// kill is what killLeader did.
type kill struct {
	node, newLeader int
	at, reaped      time.Time
	elected         time.Duration // from the kill until the others agreed on a new leader
	err             error
}

// killLeader kills the leader's process, as a crash, and waits for the
// other nodes to agree on a new one.
func (e *env) killLeader(ctx context.Context, lc *LocalCluster) kill {
	k := kill{node: -1, newLeader: -1}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	i, err := lc.Leader(lctx)
	if err != nil {
		k.err = err
		return k
	}
	// Its counters as they were at the kill: the window still counts them.
	s := e.sampleNode(ctx, i)
	s.killed = true
	e.preKill[i] = s
	e.logf("killing the leader, %s, with SIGKILL", lc.NodeIDs()[i])
	k.node, k.at = i, time.Now()
	if err := lc.Kill(i); err != nil {
		k.err = err
		return k
	}
	k.reaped = time.Now()
	ectx, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	if k.newLeader, err = lc.Leader(ectx); err != nil {
		k.err = err
		return k
	}
	k.elected = time.Since(k.at)
	e.logf("%s leads, %s after the kill", lc.NodeIDs()[k.newLeader], k.elected.Round(time.Millisecond))
	return k
}
