package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// runAcquire measures grants: each caller acquires one pre-submitted job at
// a time for a worker of capacity Leases, and moves to a fresh worker when
// that one is full. Full workers keep heartbeating in the background, as
// real ones would, so no lease expires during the run; those heartbeats
// touch no disk but do cost the leader CPU (bg_heartbeats says how many).
func runAcquire(ctx context.Context, e *env) (*Result, error) {
	per := e.cfg.Leases
	p := e.newPool("acquire")
	held := newHeldSet(ctx, e)
	defer held.stop()
	sup := &workerSupply{e: e, per: per}
	if err := p.fill(ctx, e.initialJobs()); err != nil {
		return nil, err
	}
	if err := sup.ensure(ctx, int(p.submitted.Load())); err != nil {
		return nil, err
	}
	var acquired atomic.Int64
	callers := make([]*acquirer, e.cfg.Concurrency)
	ops := make([]op, len(callers))
	for i := range callers {
		a := &acquirer{e: e, sup: sup, held: held, pool: p, acquired: &acquired}
		callers[i], ops[i] = a, a.op
	}
	topUp := func(ctx context.Context, warm *phase) error {
		// Half-full workers go on heartbeating; callers start fresh ones.
		for _, a := range callers {
			a.flush()
		}
		if err := p.topUp(ctx, warm, acquired.Load()); err != nil {
			return err
		}
		return sup.ensure(ctx, int(p.submitted.Load()))
	}
	start := held.background.Load()
	ph, w, err := e.measure(ctx, ops, hooks{afterWarmup: topUp})
	if err != nil {
		return nil, err
	}
	r := e.result(ph, w, 1)
	r.add("acquired_total", acquired.Load())
	r.add("queue", p.queue)
	r.add("leases_per_worker", per)
	r.add("workers_used", sup.next.Load())
	r.add("bg_heartbeats", held.background.Load()-start)
	return r, nil
}

// workerSupply hands out registered workers, registering more (untimed,
// between phases) so there is room for every job in the pool.
type workerSupply struct {
	e    *env
	per  int
	mu   sync.Mutex
	ids  []string
	next atomic.Int64
}

func (s *workerSupply) ensure(ctx context.Context, jobs int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	need := (jobs+s.per-1)/s.per + s.e.cfg.Concurrency
	if need <= len(s.ids) {
		return nil
	}
	ids := s.e.workerIDs("acq", len(s.ids), need-len(s.ids))
	t0 := time.Now()
	if err := s.e.register(ctx, ids, s.per); err != nil {
		return err
	}
	s.e.logf("registered %d workers of capacity %d in %s (untimed)", len(ids), s.per, time.Since(t0).Round(time.Millisecond))
	s.ids = append(s.ids, ids...)
	return nil
}

func (s *workerSupply) take() (string, bool) {
	i := int(s.next.Add(1) - 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.ids) {
		return "", false
	}
	return s.ids[i], true
}

// acquirer is one caller of the acquire workload.
type acquirer struct {
	e        *env
	sup      *workerSupply
	held     *heldSet
	pool     *pool
	acquired *atomic.Int64

	worker string
	refs   []*pb.LeaseRef
}

func (a *acquirer) op(ctx context.Context) error {
	if a.worker == "" {
		id, ok := a.sup.take()
		if !ok {
			return errDrained // no room left for the pool's jobs
		}
		a.worker = id
	}
	res, err := a.e.f.pick().Acquire(ctx, &pb.AcquireRequest{WorkerId: a.worker, Queues: []string{a.pool.queue}, Max: 1, Start: true})
	if err != nil {
		return err
	}
	if len(res.GetGrants()) == 0 {
		return a.pool.noGrant(a.acquired.Load())
	}
	a.acquired.Add(1)
	g := res.GetGrants()[0]
	a.refs = append(a.refs, &pb.LeaseRef{JobId: g.GetJob().GetSpec().GetId(), Token: g.GetLease().GetToken()})
	if len(a.refs) >= a.sup.per {
		a.flush()
	}
	return nil
}

// flush hands the current worker to the background heartbeats.
func (a *acquirer) flush() {
	if a.worker != "" && len(a.refs) > 0 {
		a.held.add(a.worker, a.refs)
	}
	a.worker, a.refs = "", nil
}
