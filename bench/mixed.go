package bench

import (
	"context"
	"sync"
	"time"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// expiries collects the lease.expired events of held leases.
type expiries struct {
	held *heldSet
	mu   sync.Mutex
	at   map[uint64]expiry
}

type expiry struct {
	event   time.Time // the leader's stamp on the expire command
	arrived time.Time // when the bench read it
	worker  *heldWorker
}

func newExpiries(h *heldSet) *expiries { return &expiries{held: h, at: map[uint64]expiry{}} }

func (x *expiries) observe(ev *pb.Event, arrived time.Time) {
	if ev.GetType() != "lease.expired" {
		return
	}
	w := x.held.owner(ev.GetToken())
	if w == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, dup := x.at[ev.GetToken()]; !dup {
		x.at[ev.GetToken()] = expiry{event: ev.GetTime().AsTime(), arrived: arrived, worker: w}
	}
}

func (x *expiries) snapshot() map[uint64]expiry {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make(map[uint64]expiry, len(x.at))
	for k, v := range x.at {
		out[k] = v
	}
	return out
}

func (x *expiries) count() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.at)
}

// addHeld prints the open loop's figures.
func addHeld(r *Result, h *heldSet, x map[uint64]expiry) {
	s := h.stats()
	lost := len(s.lost)
	for tok := range x {
		if !s.lost[tok] {
			lost++
		}
	}
	r.add("held_leases", h.leases())
	r.add("renew_ms", h.renew)
	r.add("hb_sent", s.sent)
	r.add("hb_errs", s.failed)
	r.add("hb_p50_ms", s.p50)
	r.add("hb_p99_ms", s.p99)
	r.add("hb_max_ms", s.max)
	r.add("hb_gap_max_ms", s.maxGap)
	r.add("held_expired", len(x))
	r.add("leases_lost", lost)
}

// runMixed runs job cycles while Held leases are heartbeated on schedule,
// the load of a cluster whose workers hold long leases while others churn
// short jobs.
func runMixed(ctx context.Context, e *env) (*Result, error) {
	hl, err := e.heldLoad(ctx)
	if err != nil {
		return nil, err
	}
	defer hl.stop()
	held, x, w, cy := hl.held, hl.x, hl.w, hl.cy
	p, win, err := e.measure(ctx, cy.callers(), hooks{afterWarmup: cy.topUp, held: held})
	if err != nil {
		return nil, err
	}
	held.stop()
	r := e.result(p, win, cy.cmdsPerCycle())
	r.add("cycles_total", cy.total.Load())
	r.add("queue", cy.queue(0))
	addHeld(r, held, x.snapshot())
	r.add("events_truncated", w.isTruncated())
	return r, nil
}

// heldLoad is the setup mixed and failover share: Held leases heartbeated
// on schedule, their expiries watched, and a job cycler.
type heldLoad struct {
	held *heldSet
	x    *expiries
	w    *watcher
	cy   *cycler
}

func (e *env) heldLoad(ctx context.Context) (*heldLoad, error) {
	hl := &heldLoad{held: newHeldSet(ctx, e)}
	if _, err := e.hold(ctx, hl.held, "held", e.cfg.Held, e.cfg.Leases); err != nil {
		hl.stop()
		return nil, err
	}
	hl.x = newExpiries(hl.held)
	w, err := e.watch(ctx, hl.x.observe)
	if err != nil {
		hl.stop()
		return nil, err
	}
	hl.w = w
	if hl.cy, err = e.newCycler(ctx, false); err != nil {
		hl.stop()
		return nil, err
	}
	return hl, nil
}

// stop ends the watch and the held leases' heartbeats.
func (hl *heldLoad) stop() {
	if hl.w != nil {
		hl.w.stop()
	}
	hl.held.stop()
}
