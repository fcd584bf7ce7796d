package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// cycler runs job cycles: acquire, one heartbeat, report; with submit, the
// caller first submits the job it then takes. Without submit the jobs come
// from a pre-submitted pool.
type cycler struct {
	e      *env
	pool   *pool // nil with submit
	submit bool

	total  atomic.Int64 // cycles completed, warmup and tail included
	taken  atomic.Int64 // jobs taken from the pool
	fenced atomic.Int64 // reports refused STALE_TOKEN

	// writes, when set, collects the time of every acknowledged write.
	writes *writeLog
}

// cycleCapacity is each cycling worker's capacity: one lease at a time,
// with room for leases a failed cycle left behind.
const cycleCapacity = 64

func (e *env) newCycler(ctx context.Context, submit bool) (*cycler, error) {
	cy := &cycler{e: e, submit: submit}
	if !submit {
		cy.pool = e.newPool("pool")
		if err := cy.pool.fill(ctx, e.initialJobs()); err != nil {
			return nil, err
		}
	}
	if err := e.register(ctx, e.workerIDs("cyc", 0, e.cfg.Concurrency), cycleCapacity); err != nil {
		return nil, err
	}
	return cy, nil
}

// cmdsPerCycle: acquire (with start) and report, plus the submit.
func (cy *cycler) cmdsPerCycle() float64 {
	if cy.submit {
		return 3
	}
	return 2
}

func (cy *cycler) queue(caller int) string {
	if cy.submit {
		return fmt.Sprintf("%s-q%d", cy.e.run, caller)
	}
	return cy.pool.queue
}

func (cy *cycler) topUp(ctx context.Context, warm *phase) error {
	if cy.pool == nil {
		return nil
	}
	return cy.pool.topUp(ctx, warm, cy.taken.Load())
}

func (cy *cycler) callers() []op {
	ops := make([]op, cy.e.cfg.Concurrency)
	for i := range ops {
		worker := fmt.Sprintf("%s-cyc%d", cy.e.run, i)
		queue := cy.queue(i)
		n := 0
		ops[i] = func(ctx context.Context) error {
			n++
			return cy.cycle(ctx, worker, queue, fmt.Sprintf("%s-%d", queue, n))
		}
	}
	return ops
}

func (cy *cycler) cycle(ctx context.Context, worker, queue, jobID string) error {
	f := cy.e.f
	if cy.submit {
		if _, _, err := f.pick().Submit(ctx, cy.e.spec(jobID, queue)); err != nil {
			return err
		}
		cy.writes.add()
	}
	res, err := f.pick().Acquire(ctx, &pb.AcquireRequest{WorkerId: worker, Queues: []string{queue}, Max: 1, Start: true})
	if err != nil {
		return err
	}
	if len(res.GetGrants()) == 0 {
		if cy.submit {
			return fmt.Errorf("acquire after submit granted nothing: %w", errNoGrant)
		}
		return cy.pool.noGrant(cy.taken.Load())
	}
	cy.writes.add()
	cy.taken.Add(1)
	g := res.GetGrants()[0]
	ref := &pb.LeaseRef{JobId: g.GetJob().GetSpec().GetId(), Token: g.GetLease().GetToken()}
	hb, err := f.pick().Heartbeat(ctx, worker, []*pb.LeaseRef{ref})
	if err != nil {
		return err
	}
	if v := hb.GetLeases(); len(v) != 1 || v[0].GetVerdict() != pb.Verdict_VERDICT_KEEP {
		return fmt.Errorf("heartbeat on a fresh lease: %w", errLost)
	}
	_, err = f.pick().Report(ctx, &pb.ReportRequest{WorkerId: worker, JobId: ref.JobId, Token: ref.Token, Outcome: pb.Outcome_OUTCOME_SUCCEEDED})
	if err != nil {
		if errors.Is(err, client.ErrStaleToken) {
			cy.fenced.Add(1)
		}
		return err
	}
	cy.writes.add()
	cy.total.Add(1)
	return nil
}

// writeLog records when writes were acknowledged (failover). A nil log
// records nothing.
type writeLog struct {
	mu    sync.Mutex
	times []time.Time
}

func (l *writeLog) add() {
	if l == nil {
		return
	}
	now := time.Now()
	l.mu.Lock()
	l.times = append(l.times, now)
	l.mu.Unlock()
}

func runJobCycle(ctx context.Context, e *env) (*Result, error) {
	cy, err := e.newCycler(ctx, e.cfg.Submit)
	if err != nil {
		return nil, err
	}
	var fl *flood
	if e.cfg.Flood {
		fctx, stop := context.WithCancel(ctx)
		defer stop()
		fl = e.startFlood(fctx)
		defer func() { stop(); fl.wg.Wait() }()
	}
	p, w, err := e.measure(ctx, cy.callers(), hooks{afterWarmup: cy.topUp})
	if err != nil {
		return nil, err
	}
	r := e.result(p, w, cy.cmdsPerCycle())
	r.add("flood", e.cfg.Flood)
	if fl != nil {
		r.add("flood_bodies", fl.bodies.Load())
		r.add("flood_idle_conns", fl.idle.Load())
		r.add("flood_ghost_heartbeats", fl.ghosts.Load())
		r.add("flood_bad_auth", fl.badAuth.Load())
		r.add("flood_served", fl.served.Load())
	}
	r.add("submit", cy.submit)
	r.add("cycles_total", cy.total.Load())
	r.add("fenced", cy.fenced.Load())
	r.add("queue", cy.queue(0))
	return r, nil
}
