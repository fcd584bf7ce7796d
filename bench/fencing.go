package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// runFencing makes stale reports on purpose and checks every one is
// refused. Each cycle submits a job to the caller's own queue and has two
// workers take it in turn Rounds times, each releasing it for the other but
// the last; then every earlier holder reports with its old token (each must
// be refused STALE_TOKEN), and the last holder reports for real. Release is
// used rather than expiry because it takes a lease away at once, so a
// second of bench makes hundreds of stale reports; the expiry path of the
// same check is failover's.
//
// Tokens are checked twice: as the bench got them (each grant of a job must
// be above the one before) and as the cluster's event log recorded them.
func runFencing(ctx context.Context, e *env) (*Result, error) {
	rounds := e.cfg.Rounds
	var fc fenceCounts
	byJob := &jobTokens{events: map[string][]uint64{}, grants: map[string][]uint64{}}
	prefix := e.run + "-f"
	w, err := e.watch(ctx, func(ev *pb.Event, _ time.Time) {
		if strings.HasPrefix(ev.GetJobId(), prefix) {
			byJob.observe(ev)
		}
	})
	if err != nil {
		return nil, err
	}
	defer w.stop()
	ids := e.workerIDs("fw", 0, 2*e.cfg.Concurrency)
	if err := e.register(ctx, ids, cycleCapacity); err != nil {
		return nil, err
	}
	ops := make([]op, e.cfg.Concurrency)
	for i := range ops {
		workers := [2]string{ids[2*i], ids[2*i+1]}
		n, gen := 0, 0
		ops[i] = func(ctx context.Context) error {
			// After a failed cycle its job may still be queued: a new queue
			// keeps the next cycle's acquire to its own job.
			queue := fmt.Sprintf("%s%d-%d", prefix, i, gen)
			n++
			err := fenceCycle(ctx, e, &fc, byJob, queue, fmt.Sprintf("%s-%d", queue, n), workers, rounds)
			if err != nil {
				gen++
			}
			return err
		}
	}
	p, win, err := e.measure(ctx, ops, hooks{})
	if err != nil {
		return nil, err
	}
	// The event log has recorded every grant of a completed cycle once the
	// stream has caught up with the last report.
	last := fc.lastJob.Load()
	if last != nil {
		byJob.waitFor(ctx, *last, 10*time.Second)
	}
	evOrder, mismatch, checked := byJob.check()
	r := e.result(p, win, float64(3*rounds))
	r.add("rounds", rounds)
	r.add("cycles_total", fc.cycles.Load())
	r.add("stale_refused", fc.refused.Load())
	r.add("stale_accepted", fc.accepted.Load())
	r.add("out_of_order", fc.outOfOrder.Load())
	r.add("stale_events", byJob.staleEvents())
	r.add("events_out_of_order", evOrder)
	r.add("events_mismatch", mismatch)
	r.add("jobs_checked", checked)
	r.add("events_truncated", w.isTruncated())
	return r, nil
}

type fenceCounts struct {
	cycles, refused, accepted, outOfOrder atomic.Int64
	lastJob                               atomic.Pointer[string]
}

func fenceCycle(ctx context.Context, e *env, fc *fenceCounts, byJob *jobTokens, queue, jobID string, workers [2]string, rounds int) error {
	f := e.f
	if _, _, err := f.pick().Submit(ctx, e.spec(jobID, queue)); err != nil {
		return err
	}
	tokens := make([]uint64, 0, rounds)
	for r := range rounds {
		worker := workers[r%2]
		res, err := f.pick().Acquire(ctx, &pb.AcquireRequest{WorkerId: worker, Queues: []string{queue}, Max: 1, Start: true})
		if err != nil {
			return err
		}
		if len(res.GetGrants()) != 1 || res.GetGrants()[0].GetJob().GetSpec().GetId() != jobID {
			return fmt.Errorf("round %d of %s: acquire granted %d leases, not the job", r, jobID, len(res.GetGrants()))
		}
		tok := res.GetGrants()[0].GetLease().GetToken()
		if n := len(tokens); n > 0 && tok <= tokens[n-1] {
			fc.outOfOrder.Add(1)
		}
		tokens = append(tokens, tok)
		byJob.granted(jobID, tok)
		if r < rounds-1 {
			if _, err := f.pick().Release(ctx, worker, jobID, tok, "bench fencing"); err != nil {
				return err
			}
		}
	}
	for r, tok := range tokens[:rounds-1] {
		_, err := f.pick().Report(ctx, &pb.ReportRequest{WorkerId: workers[r%2], JobId: jobID, Token: tok,
			Outcome: pb.Outcome_OUTCOME_SUCCEEDED, Ref: fmt.Sprintf("stale-%d", tok)})
		switch {
		case err == nil:
			fc.accepted.Add(1)
		case errors.Is(err, client.ErrStaleToken):
			fc.refused.Add(1)
		default:
			return err
		}
	}
	last := tokens[rounds-1]
	if _, err := f.pick().Report(ctx, &pb.ReportRequest{WorkerId: workers[(rounds-1)%2], JobId: jobID, Token: last,
		Outcome: pb.Outcome_OUTCOME_SUCCEEDED}); err != nil {
		return err
	}
	fc.cycles.Add(1)
	fc.lastJob.Store(&jobID)
	return nil
}

// jobTokens are each job's grants: as the bench got them, and as the
// event log recorded them (lease.acquired, in log order).
type jobTokens struct {
	mu      sync.Mutex
	changed chan struct{}
	events  map[string][]uint64
	grants  map[string][]uint64
	stale   int
	done    map[string]bool // a lease.reported event was seen
}

func (j *jobTokens) granted(job string, tok uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.grants[job] = append(j.grants[job], tok)
}

func (j *jobTokens) observe(ev *pb.Event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch ev.GetType() {
	case "lease.acquired":
		j.events[ev.GetJobId()] = append(j.events[ev.GetJobId()], ev.GetToken())
	case "lease.stale_report":
		j.stale++
	case "lease.reported":
		if j.done == nil {
			j.done = map[string]bool{}
		}
		j.done[ev.GetJobId()] = true
	default:
		return
	}
	if j.changed != nil {
		close(j.changed)
		j.changed = nil
	}
}

// waitFor waits until the job's report has been streamed, or bound passes.
func (j *jobTokens) waitFor(ctx context.Context, job string, bound time.Duration) {
	t := time.NewTimer(bound)
	defer t.Stop()
	for {
		j.mu.Lock()
		if j.done[job] {
			j.mu.Unlock()
			return
		}
		if j.changed == nil {
			j.changed = make(chan struct{})
		}
		ch := j.changed
		j.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (j *jobTokens) staleEvents() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stale
}

// check compares the two records: the event log's tokens of each job must
// strictly increase and be exactly the grants the bench got. Jobs whose
// report has not been streamed are not checked.
func (j *jobTokens) check() (outOfOrder, mismatch, checked int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for job, got := range j.grants {
		if !j.done[job] {
			continue
		}
		checked++
		ev := j.events[job]
		for i := 1; i < len(ev); i++ {
			if ev[i] <= ev[i-1] {
				outOfOrder++
				break
			}
		}
		if !slices.Equal(ev, got) {
			mismatch++
		}
	}
	return outOfOrder, mismatch, checked
}
