package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// runExpiry abandons Abandon leases at once and watches them expire. The
// leases are held by workers heartbeating on schedule; then every worker
// sends one last heartbeat at the same moment and falls silent. A lease's
// deadline is its worker's last acknowledged heartbeat's send time plus
// toleration (the server counts from the arrival, never earlier, so an
// expiry before it is a bug: early). Its lateness is the expiry's time, as
// the leader stamped the expire command, minus the deadline: the leader's
// tick, its quorum check and the commits.
func runExpiry(ctx context.Context, e *env) (*Result, error) {
	// A witness worker keeps heartbeating throughout, as part of a real
	// fleet would: with every worker silent at once the leader holds the
	// expiries, taking itself for the one cut off (cluster/expire.go).
	stopWitness, err := e.witness(ctx)
	if err != nil {
		return nil, err
	}
	defer stopWitness()
	held := newHeldSet(ctx, e)
	defer held.stop()
	queue, err := e.hold(ctx, held, "exp", e.cfg.Abandon, e.cfg.Leases)
	if err != nil {
		return nil, err
	}
	x := newExpiries(held)
	all := make(chan struct{})
	var once sync.Once
	w, err := e.watch(ctx, func(ev *pb.Event, arrived time.Time) {
		x.observe(ev, arrived)
		if x.count() == held.leases() {
			once.Do(func() { close(all) })
		}
	})
	if err != nil {
		return nil, err
	}
	defer w.stop()

	// Abandon: no more scheduled heartbeats, then one last one each, at once.
	held.stop()
	e.logf("abandoning %d leases of %d workers at once", held.leases(), len(held.workers))
	final, finalErrs := lastHeartbeats(ctx, e, held.workers)
	deadline := map[uint64]time.Time{}
	var first, last time.Time
	for _, hw := range held.workers {
		d := hw.lastAck(final.Add(time.Hour)).Add(e.timings.toleration)
		for _, ref := range hw.refs {
			deadline[ref.GetToken()] = d
		}
		if first.IsZero() || d.Before(first) {
			first = d
		}
		last = maxTime(last, d)
	}
	bound := last.Add(e.cfg.DrainTimeout)
	e.logf("deadlines from %s to %s from now; waiting until every lease expired (at most %s)",
		time.Until(first).Round(time.Millisecond), time.Until(last).Round(time.Millisecond), time.Until(bound).Round(time.Second))
	// The window is the drain: from the first deadline to the last expiry.
	if !sleepUntil(ctx, first) {
		return nil, ctx.Err()
	}
	a := e.mark(ctx)
	t := time.NewTimer(time.Until(bound))
	select {
	case <-all:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	b := e.mark(ctx)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := w.stop(); err != nil {
		return nil, fmt.Errorf("event stream: %w", err)
	}

	// The cluster's own word on the jobs: each abandoned job must be queued
	// again. A job that is not is missing, whatever the events said.
	requeued, err := e.countJobs(ctx, &pb.ListJobsRequest{Queue: queue, State: pb.JobState_JOB_STATE_QUEUED})
	if err != nil {
		return nil, fmt.Errorf("counting the requeued jobs: %w", err)
	}

	got := x.snapshot()
	lateness := newHist()
	var early int
	var lastEvent time.Time
	var lagMax time.Duration
	for tok, ex := range got {
		late := ex.event.Sub(deadline[tok])
		if late < 0 {
			early++
		}
		lateness.add(late)
		lastEvent = maxTime(lastEvent, ex.event)
		lagMax = max(lagMax, ex.arrived.Sub(ex.event))
	}
	p := &phase{start: first, end: maxTime(lastEvent, first), ops: int64(len(got)), errs: int64(finalErrs), hist: lateness, errKinds: map[string]int64{}}
	r := e.result(p, between(a, b), math.NaN()) // one expire command ends many leases
	r.add("abandoned", held.leases())
	r.add("workers", len(held.workers))
	r.add("expired", len(got))
	r.add("missing", held.leases()-len(got))
	r.add("jobs_requeued", requeued)
	r.add("jobs_missing", int64(held.leases())-requeued)
	r.add("early", early)
	r.add("late_p50_ms", p.hist.quantile(0.5))
	r.add("late_p99_ms", p.hist.quantile(0.99))
	r.add("late_max_ms", p.hist.max)
	r.add("drain_ms", p.window())
	r.add("deadline_spread_ms", last.Sub(first))
	r.add("toleration_ms", e.timings.toleration)
	r.add("observe_lag_max_ms", lagMax)
	r.add("events_truncated", w.isTruncated())
	return r, nil
}

// countJobs counts the jobs req selects, every page, as the leader sees
// them.
func (e *env) countJobs(ctx context.Context, req *pb.ListJobsRequest) (int64, error) {
	req.PageSize = 1000
	var n int64
	for {
		resp, err := e.f.first().Jobs(ctx, req)
		if err != nil {
			return n, err
		}
		n += int64(len(resp.GetJobs()))
		if resp.GetNextPageToken() == 0 {
			return n, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// lastHeartbeats sends one heartbeat for every worker at the same moment
// and waits for the answers; it returns when they were sent and how many
// failed.
func lastHeartbeats(ctx context.Context, e *env, workers []*heldWorker) (time.Time, int) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for _, w := range workers {
		wg.Go(func() {
			<-start
			sent := time.Now()
			resp, err := e.f.pick().Heartbeat(ctx, w.id, w.refs)
			if err == nil {
				w.acknowledge(sent, resp)
				return
			}
			mu.Lock()
			failed++
			mu.Unlock()
		})
	}
	at := time.Now()
	close(start)
	wg.Wait()
	if failed > 0 {
		e.logf("%d of the last heartbeats failed: those workers' deadlines count from an earlier one", failed)
	}
	return at, failed
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// witness registers a worker and heartbeats it every half renew until the
// returned stop is called.
func (e *env) witness(ctx context.Context) (stop func(), err error) {
	id := e.run + "-witness"
	if err := e.register(ctx, []string{id}, 1); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(e.timings.renew / 2)
		defer t.Stop()
		for {
			hctx, hcancel := context.WithTimeout(wctx, e.timings.renew)
			e.f.first().Heartbeat(hctx, id, nil)
			hcancel()
			select {
			case <-t.C:
			case <-wctx.Done():
				return
			}
		}
	}()
	return func() { cancel(); <-done }, nil
}
