package workload

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Reader reads job state: a linearizable get_job, then a fence check of
// one of the job's tokens (its live one or an older one), and now and
// then a stale get_job.
type Reader struct {
	c        *Caller
	jobs     *Jobs
	interval time.Duration
	rng      *rand.Rand
}

// NewReader reads jobs from jobs every interval.
func NewReader(c *Caller, jobs *Jobs, interval time.Duration, seed uint64) *Reader {
	return &Reader{c: c, jobs: jobs, interval: interval, rng: rand.New(rand.NewPCG(seed, 2))}
}

// Run reads until ctx ends.
func (r *Reader) Run(ctx context.Context) { every(ctx, r.interval, r.step) }

func (r *Reader) step(ctx context.Context) {
	id := r.jobs.Pick(r.rng)
	if id == "" {
		return
	}
	if r.rng.IntN(5) == 0 {
		r.c.GetJob(ctx, id, true)
		return
	}
	job, err := r.c.GetJob(ctx, id, false)
	if err != nil {
		return
	}
	r.c.Fence(ctx, id, pickToken(r.rng, job))
}

// pickToken is the job's live token half the time, else any of its
// tokens (or 1 if it has none).
func pickToken(rng *rand.Rand, job *leaseholdv1.Job) uint64 {
	ls := job.GetLeases()
	if len(ls) == 0 {
		return 1
	}
	if rng.IntN(2) == 0 {
		last := ls[len(ls)-1]
		if last.GetState() == leaseholdv1.LeaseState_LEASE_STATE_ACTIVE {
			return last.GetToken()
		}
	}
	return ls[rng.IntN(len(ls))].GetToken()
}

// StaleWriter plays a worker that lost its lease and does not know it: it
// reads a job (linearizably), takes one of its leases that has ended, and
// writes with that token to both sinks, and now and then reports with it.
// The fenced sink must refuse every such write, the cluster every such
// report (STALE_TOKEN, or CONFLICT on a lease already reported by another
// report id).
type StaleWriter struct {
	c        *Caller
	jobs     *Jobs
	sinks    *Sinks
	interval time.Duration
	rng      *rand.Rand
	n        int
}

// NewStaleWriter writes through sinks every interval.
func NewStaleWriter(c *Caller, jobs *Jobs, sinks *Sinks, interval time.Duration, seed uint64) *StaleWriter {
	return &StaleWriter{c: c, jobs: jobs, sinks: sinks, interval: interval, rng: rand.New(rand.NewPCG(seed, 3))}
}

// Run writes until ctx ends.
func (s *StaleWriter) Run(ctx context.Context) { every(ctx, s.interval, s.step) }

func (s *StaleWriter) step(ctx context.Context) {
	id := s.jobs.Pick(s.rng)
	if id == "" {
		return
	}
	job, err := s.c.GetJob(ctx, id, false)
	if err != nil {
		return
	}
	var ended []*leaseholdv1.Lease
	for _, l := range job.GetLeases() {
		if l.GetState() != leaseholdv1.LeaseState_LEASE_STATE_ACTIVE {
			ended = append(ended, l)
		}
	}
	if len(ended) == 0 {
		return
	}
	l := ended[s.rng.IntN(len(ended))]
	s.n++
	for _, sink := range []string{history.SinkFenced, history.SinkUnfenced} {
		s.sinks.Write(ctx, SinkWrite{Sink: sink, JobID: id, Token: l.GetToken(), WorkerID: l.GetWorkerId(), Key: "stale/" + id})
	}
	if s.rng.IntN(3) == 0 {
		s.c.Report(ctx, &leaseholdv1.ReportRequest{WorkerId: l.GetWorkerId(), JobId: id, Token: l.GetToken(),
			ReportId: newReportID(s.rng), Outcome: leaseholdv1.Outcome_OUTCOME_SUCCEEDED, Ref: "stale-" + id})
	}
}
