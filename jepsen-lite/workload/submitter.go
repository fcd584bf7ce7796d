package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Submitters: the main executor, and one that stops early and cancels
// what it left queued (cancel_submitter) at the end.
const (
	SubmitterMain  = "exec-a"
	SubmitterEarly = "exec-b"
)

// SubmitterConfig shapes the stream of jobs.
type SubmitterConfig struct {
	// Interval between actions; MaxQueued pauses submitting while that
	// many worker jobs wait.
	Interval  time.Duration
	MaxQueued int
	// Renew and Toleration size the jobs: short ones run for a few
	// renews, long ones for more than toleration.
	Renew, Toleration time.Duration
}

// Submitter submits jobs, now and then resubmits one (the same spec, and
// once in a while a different one: a conflict), cancels or kills one.
type Submitter struct {
	c    *Caller
	jobs *Jobs
	cfg  SubmitterConfig
	rng  *rand.Rand
	next int
}

// NewSubmitter records its calls through c and its jobs in jobs.
func NewSubmitter(c *Caller, jobs *Jobs, cfg SubmitterConfig, seed uint64) *Submitter {
	return &Submitter{c: c, jobs: jobs, cfg: cfg, rng: rand.New(rand.NewPCG(seed, 1))}
}

// Run acts every Interval until ctx ends.
func (s *Submitter) Run(ctx context.Context) { every(ctx, s.cfg.Interval, s.step) }

func (s *Submitter) step(ctx context.Context) {
	r := s.rng.Float64()
	switch {
	case r < 0.04:
		if id := s.jobs.Pick(s.rng); id != "" {
			s.c.Cancel(ctx, id, false, "jepsen-lite cancel")
		}
		return
	case r < 0.06:
		if id := s.jobs.Pick(s.rng); id != "" {
			s.c.Cancel(ctx, id, true, "jepsen-lite kill")
		}
		return
	case r < 0.09:
		if id := s.jobs.Pick(s.rng); id != "" {
			s.c.Submit(ctx, cloneSpec(s.jobs.Spec(id)), 0) // the same spec: created false
		}
		return
	case r < 0.10:
		if id := s.jobs.Pick(s.rng); id != "" {
			spec := cloneSpec(s.jobs.Spec(id))
			spec.Priority += 100 // another spec under the same id: a conflict
			s.c.Submit(ctx, spec, 0)
		}
		return
	}
	if s.backlog(ctx) >= s.cfg.MaxQueued {
		return
	}
	spec, runIn := s.newSpec()
	s.jobs.Add(spec)
	s.c.Submit(ctx, cloneSpec(spec), runIn)
}

// backlog counts the worker jobs waiting, from any node (not recorded).
func (s *Submitter) backlog(ctx context.Context) int {
	cctx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	defer cancel()
	resp, err := s.c.Client.Jobs(cctx, &leaseholdv1.ListJobsRequest{Queue: QueueMain, State: leaseholdv1.JobState_JOB_STATE_QUEUED,
		PageSize: 1000, Consistency: leaseholdv1.Consistency_CONSISTENCY_STALE})
	if err != nil {
		return s.cfg.MaxQueued // do not pile up while the cluster is away
	}
	return len(resp.GetJobs())
}

// newSpec makes the next job: mostly short ones, some long (past
// toleration), some run-style (lost with their worker), some for the
// Reporter; a few short ones fail retryably (a third of those snooze
// instead of taking the retry policy's backoff); a third of the long ones
// have a timeout shorter than their run, so each attempt times out. Some of the workers'
// jobs are submitted to run later, after runIn. Delays stay short beside a
// run: a job that fails every attempt waits about 1 s and 2 s (the
// server's default policy) and snoozes at most 0.5 s each time.
func (s *Submitter) newSpec() (spec *leaseholdv1.JobSpec, runIn time.Duration) {
	s.next++
	spec = &leaseholdv1.JobSpec{
		Id: fmt.Sprintf("j%05d", s.next), Queue: QueueMain, Priority: int32(s.rng.IntN(4)),
		Submitter: SubmitterMain, MaxAttempts: 3,
	}
	if s.rng.IntN(100) < 15 {
		spec.Submitter = SubmitterEarly
	}
	renew := s.cfg.Renew.Milliseconds()
	p := Payload{WriteEveryMs: max(renew, 50)}
	switch r := s.rng.IntN(100); {
	case r < 10:
		spec.Queue, spec.Kind = QueueManual, KindManual
		p.RunMs = 0
	case r < 25:
		spec.Kind = KindLong
		tol := s.cfg.Toleration.Milliseconds()
		p.RunMs = tol*3/2 + s.rng.Int64N(tol+1)
		if s.rng.IntN(3) == 0 {
			// Past its timeout every attempt: revoked with a kill each
			// time, it ends dead after its attempts.
			spec.Timeout = durationpb.New(max(time.Second, time.Duration(tol/2)*time.Millisecond))
		}
	case r < 40:
		spec.Kind, spec.OnWorkerLost = KindRun, leaseholdv1.LostPolicy_LOST_POLICY_FAIL
		p.RunMs = renew + s.rng.Int64N(4*renew+1)
	default:
		spec.Kind = KindShort
		p.RunMs = s.rng.Int64N(4*renew + 1)
		p.Fail = s.rng.IntN(100) < 15
		if p.Fail && s.rng.IntN(3) == 0 {
			p.SnoozeMs = 100 + s.rng.Int64N(401)
		}
	}
	if spec.Queue == QueueMain && s.rng.IntN(100) < 15 {
		runIn = 500*time.Millisecond + time.Duration(s.rng.Int64N(2501))*time.Millisecond
	}
	spec.Payload = p.Encode()
	return spec, runIn
}

func cloneSpec(s *leaseholdv1.JobSpec) *leaseholdv1.JobSpec {
	return proto.Clone(s).(*leaseholdv1.JobSpec)
}

// SubmitterCanceller makes one CancelSubmitterJobs call (the client
// package's CancelSubmitter loops and keeps only a count; the history
// needs the ids each call cancelled).
type SubmitterCanceller func(ctx context.Context, req *leaseholdv1.CancelSubmitterJobsRequest) (*leaseholdv1.CancelSubmitterJobsResponse, error)

// CancelSubmitter cancels every queued job of submitter in one call,
// recorded as one cancel_submitter op with the ids it cancelled. It is not
// retried: an unanswered call stays an unknown outcome. An error the
// client package did not classify is recorded as unknown too.
func CancelSubmitter(ctx context.Context, rec *history.Recorder, process string, call SubmitterCanceller, submitter string) ([]string, error) {
	id := rec.Invoke(process, history.OpCancelSubmitter, history.Input{Submitter: submitter})
	resp, err := call(ctx, &leaseholdv1.CancelSubmitterJobsRequest{Submitter: submitter, Reason: "executor stopped"})
	rec.CompleteErr(id, err, &history.Output{Cancelled: resp.GetCancelled()})
	return resp.GetCancelled(), err
}
