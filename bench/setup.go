package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// setupConcurrency is how many calls setup makes at once: enough to share
// fsyncs, few enough not to queue behind each other.
const setupConcurrency = 64

// parallel runs fn(i) for i in [0, n) on up to workers goroutines and
// returns the first error, after which it starts no more.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && err != context.Canceled {
		return err
	}
	return ctx.Err()
}

// jobKind is the kind of every bench job: not "run", so a job whose worker
// is lost is queued again rather than failed.
const jobKind = "bench"

// pool is the pre-submitted jobs of acquire and job-cycle, in one queue.
// Submitting is setup, never timed.
type pool struct {
	e         *env
	queue     string
	submitted atomic.Int64
	payload   []byte
}

func (e *env) newPool(name string) *pool {
	return &pool{e: e, queue: e.run + "-" + name, payload: make([]byte, e.cfg.PayloadSize)}
}

func (e *env) spec(id, queue string) *pb.JobSpec {
	return &pb.JobSpec{Id: id, Queue: queue, Kind: jobKind, Payload: make([]byte, e.cfg.PayloadSize), Submitter: e.run}
}

// fill submits n more jobs.
func (p *pool) fill(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	t0 := time.Now()
	base := p.submitted.Load()
	cl := p.e.f.first()
	err := parallel(ctx, n, setupConcurrency, func(ctx context.Context, i int) error {
		spec := &pb.JobSpec{Id: fmt.Sprintf("%s-%d", p.queue, base+int64(i)), Queue: p.queue, Kind: jobKind,
			Payload: p.payload, Submitter: p.e.run}
		_, _, err := cl.Submit(ctx, spec)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w: submitting %d jobs: %w", ErrSetup, n, err)
	}
	p.submitted.Add(int64(n))
	p.e.logf("submitted %d jobs to %s in %s (untimed)", n, p.queue, time.Since(t0).Round(time.Millisecond))
	return nil
}

// topUp sizes the pool for the window from the rate the warmup phase ran
// at: enough for twice that rate over the window (a warmup on a busy
// machine, or a cold one, runs slower than the window), plus a margin per
// caller. used is how many jobs the pool has given out so far.
func (p *pool) topUp(ctx context.Context, warm *phase, used int64) error {
	if p.e.cfg.Jobs > 0 {
		return nil
	}
	rate := 1000.0 // a guess when there was no warmup: --jobs is better then
	if warm != nil && warm.ops > 0 && warm.window() > 0 {
		rate = float64(warm.ops) / warm.window().Seconds()
	}
	need := int64(math.Ceil(2*rate*p.e.cfg.Duration.Seconds())) + int64(4*p.e.cfg.Concurrency)
	left := p.submitted.Load() - used
	return p.fill(ctx, int(need-left))
}

// noGrant says what an acquire that granted nothing means. Near the end of
// the pool it is the pool running out (errDrained), which ends the window.
// While more jobs are left than the callers could be taking at once (each
// caller has one acquire in flight, and as many grants may be committed but
// not yet counted), it is a grant the cluster should have made and did not:
// an error, never mistaken for the end of the pool. taken is how many jobs
// the pool has given out.
func (p *pool) noGrant(taken int64) error {
	left := p.submitted.Load() - taken
	if left > int64(2*p.e.cfg.Concurrency) {
		return fmt.Errorf("acquire granted nothing with %d jobs of the pool left: %w", left, errNoGrant)
	}
	return errDrained
}

// initialJobs is the pool before warmup: the --jobs given, or enough for
// the warmup at a guessed rate.
func (e *env) initialJobs() int {
	if e.cfg.Jobs > 0 {
		return e.cfg.Jobs
	}
	if e.cfg.Warmup == 0 {
		return 0 // topUp sizes it
	}
	return int(1000*e.cfg.Warmup.Seconds()) + 4*e.cfg.Concurrency
}

// register registers workers with the given capacity; cleanup deregisters
// them on an external cluster.
func (e *env) register(ctx context.Context, ids []string, capacity int) error {
	cl := e.f.first()
	err := parallel(ctx, len(ids), setupConcurrency, func(ctx context.Context, i int) error {
		_, err := cl.RegisterWorker(ctx, ids[i], uint32(capacity))
		return err
	})
	e.workers = append(e.workers, ids...)
	if err != nil {
		return fmt.Errorf("%w: registering %d workers: %w", ErrSetup, len(ids), err)
	}
	return nil
}

func (e *env) workerIDs(prefix string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%s%d", e.run, prefix, from+i)
	}
	return out
}
