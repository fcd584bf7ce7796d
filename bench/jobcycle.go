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
// from a pre-submitted pool. Chained (the default, as the worker runtime
// does), the report asks for the caller's next job (ReportRequest.next),
// and a cycle acquires on its own only when the last report brought
// nothing; with submit, the next job is then submitted before the report.
type cycler struct {
	e       *env
	pool    *pool // nil with submit
	submit  bool
	chained bool

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
	cy := &cycler{e: e, submit: submit, chained: !e.cfg.Unchained}
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
		c := &cycleCaller{cy: cy, worker: fmt.Sprintf("%s-cyc%d", cy.e.run, i), queue: cy.queue(i)}
		ops[i] = c.cycle
	}
	return ops
}

// cycleCaller is one caller's worker, its queue, and the grant its last
// report brought (chained).
type cycleCaller struct {
	cy            *cycler
	worker, queue string
	n             int
	submitted     bool      // the job numbered n+1 is queued (chained with submit)
	carried       *pb.Grant // the next job, from the last report
}

func (c *cycleCaller) jobID(n int) string { return fmt.Sprintf("%s-%d", c.queue, n) }

func (c *cycleCaller) cycle(ctx context.Context) error {
	cy := c.cy
	f := cy.e.f
	c.n++
	g := c.carried
	c.carried = nil
	if g == nil {
		if cy.submit && !c.submitted {
			if _, _, err := f.pick().Submit(ctx, cy.e.spec(c.jobID(c.n), c.queue)); err != nil {
				return err
			}
			cy.writes.add()
		}
		c.submitted = false
		res, err := f.pick().Acquire(ctx, &pb.AcquireRequest{WorkerId: c.worker, Queues: []string{c.queue}, Max: 1, Start: true})
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
		g = res.GetGrants()[0]
	}
	ref := &pb.LeaseRef{JobId: g.GetJob().GetSpec().GetId(), Token: g.GetLease().GetToken()}
	hb, err := f.pick().Heartbeat(ctx, c.worker, []*pb.LeaseRef{ref})
	if err != nil {
		return err
	}
	if v := hb.GetLeases(); len(v) != 1 || v[0].GetVerdict() != pb.Verdict_VERDICT_KEEP {
		return fmt.Errorf("heartbeat on a fresh lease: %w", errLost)
	}
	req := &pb.ReportRequest{WorkerId: c.worker, JobId: ref.JobId, Token: ref.Token, Outcome: pb.Outcome_OUTCOME_SUCCEEDED}
	if cy.chained {
		if cy.submit {
			if _, _, err := f.pick().Submit(ctx, cy.e.spec(c.jobID(c.n+1), c.queue)); err != nil {
				return err
			}
			cy.writes.add()
			c.submitted = true
		}
		req.Next = &pb.AcquireRequest{Queues: []string{c.queue}, Max: 1, Start: true}
	}
	resp, err := f.pick().Report(ctx, req)
	if err != nil {
		if errors.Is(err, client.ErrStaleToken) {
			cy.fenced.Add(1)
		}
		return err
	}
	cy.writes.add()
	cy.total.Add(1)
	if gs := resp.GetNext().GetGrants(); len(gs) > 0 {
		c.carried = gs[0]
		cy.taken.Add(1)
	}
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
	r.add("chained", cy.chained)
	r.add("cycles_total", cy.total.Load())
	r.add("fenced", cy.fenced.Load())
	r.add("queue", cy.queue(0))
	return r, nil
}
