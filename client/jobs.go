package client

import (
	"context"
	"fmt"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ReadOption changes how a read is served.
type ReadOption func(*readOptions)

type readOptions struct {
	consistency leaseholdv1.Consistency
}

// Stale lets any node answer from its own state, which may lag the leader.
// Reads are linearizable without it.
func Stale() ReadOption {
	return func(o *readOptions) { o.consistency = leaseholdv1.Consistency_CONSISTENCY_STALE }
}

func consistency(opts []ReadOption) leaseholdv1.Consistency {
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.consistency
}

// DefaultQueue is the queue Submit sends a job to when its spec names none,
// and the queue a Worker takes jobs from when its options name none.
const DefaultQueue = "default"

// Submit submits a job. It is idempotent on spec.Id: the same id and spec
// answer the existing job with created false; the same id with another spec
// fails with ErrConflict. An empty spec.Id is filled with a random id before
// the first attempt (and written into spec), so retries cannot submit twice.
// An empty spec.Queue is filled with DefaultQueue (and written into spec):
// the API refuses a job without a queue. RunAt or RunIn submit it to run
// later.
func (c *Client) Submit(ctx context.Context, spec *leaseholdv1.JobSpec, opts ...SubmitOption) (job *leaseholdv1.Job, created bool, err error) {
	if spec == nil {
		return nil, false, fmt.Errorf("leasehold: submit: %w: nil spec", ErrInvalidArgument)
	}
	if spec.Id == "" {
		spec.Id = newID()
	}
	if spec.Queue == "" {
		spec.Queue = DefaultQueue
	}
	req := &leaseholdv1.SubmitJobRequest{Spec: spec}
	for _, o := range opts {
		o(req)
	}
	resp, err := unary(ctx, c, callOpts{}, req, jobSvc, jobsAPI.SubmitJob)
	if err != nil {
		return nil, false, err
	}
	return resp.GetJob(), resp.GetCreated(), nil
}

// SubmitOption says when a submitted job may run.
type SubmitOption func(*leaseholdv1.SubmitJobRequest)

// RunAt submits the job to run no earlier than t, by the leader's clock.
func RunAt(t time.Time) SubmitOption {
	return func(r *leaseholdv1.SubmitJobRequest) { r.RunAt, r.RunIn = timestamppb.New(t), nil }
}

// RunIn submits the job to run no earlier than d from when the leader
// receives it: the client's own clock does not matter.
func RunIn(d time.Duration) SubmitOption {
	return func(r *leaseholdv1.SubmitJobRequest) { r.RunIn, r.RunAt = durationpb.New(d), nil }
}

// Job reads one job.
func (c *Client) Job(ctx context.Context, id string, opts ...ReadOption) (*leaseholdv1.Job, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.GetJobRequest{Id: id, Consistency: consistency(opts)}, jobSvc, jobsAPI.GetJob)
	if err != nil {
		return nil, err
	}
	return resp.GetJob(), nil
}

// Jobs lists one page of jobs; pass the answer's NextPageToken as the next
// request's PageToken until it is zero.
func (c *Client) Jobs(ctx context.Context, req *leaseholdv1.ListJobsRequest) (*leaseholdv1.ListJobsResponse, error) {
	if req == nil {
		req = &leaseholdv1.ListJobsRequest{}
	}
	return unary(ctx, c, callOpts{}, req, jobSvc, jobsAPI.ListJobs)
}

// Cancel cancels a queued job, or revokes a leased one (kill: the worker is
// told to stop at once rather than wind down). revoked says the job was
// leased, so its worker will be told at its next heartbeat.
func (c *Client) Cancel(ctx context.Context, id string, kill bool, reason string) (job *leaseholdv1.Job, revoked bool, err error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.CancelJobRequest{Id: id, Kill: kill, Reason: reason}, jobSvc, jobsAPI.CancelJob)
	if err != nil {
		return nil, false, err
	}
	return resp.GetJob(), resp.GetRevoked(), nil
}

// CancelSubmitter cancels every queued job of submitter, in as many calls
// as it takes, and returns how many it cancelled. Leased jobs are not
// touched. On an error, cancelled counts the calls that succeeded.
func (c *Client) CancelSubmitter(ctx context.Context, submitter, reason string) (cancelled int, err error) {
	for n := 0; ; {
		resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.CancelSubmitterJobsRequest{Submitter: submitter, Reason: reason}, jobSvc, jobsAPI.CancelSubmitterJobs)
		if err != nil {
			return cancelled, err
		}
		cancelled += len(resp.GetCancelled())
		if resp.GetRemaining() == 0 {
			return cancelled, nil
		}
		if len(resp.GetCancelled()) > 0 {
			n = 0
			continue
		}
		// Jobs remain but none were cancelled: pause rather than spin.
		if !c.sleep(ctx, n, 0) {
			return cancelled, ctx.Err()
		}
		n++
	}
}

// CancelSubmitterOnce is one CancelSubmitterJobs call, not retried (a
// single attempt, which a follower forwards to the leader): callers that
// need each call's cancelled ids, such as a history recorder, loop
// themselves. Its answer says how many queued jobs remain.
func (c *Client) CancelSubmitterOnce(ctx context.Context, req *leaseholdv1.CancelSubmitterJobsRequest) (*leaseholdv1.CancelSubmitterJobsResponse, error) {
	return unary(ctx, c, callOpts{once: true}, req, jobSvc, jobsAPI.CancelSubmitterJobs)
}

// Fence asks, linearizably, whether token is still the live lease of jobID.
func (c *Client) Fence(ctx context.Context, jobID string, token uint64) (*leaseholdv1.CheckFenceResponse, error) {
	return unary(ctx, c, callOpts{}, &leaseholdv1.CheckFenceRequest{JobId: jobID, Token: token}, jobSvc, jobsAPI.CheckFence)
}

// Lease reads one lease by its token.
func (c *Client) Lease(ctx context.Context, token uint64, opts ...ReadOption) (*leaseholdv1.Lease, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.GetLeaseRequest{Token: token, Consistency: consistency(opts)}, jobSvc, jobsAPI.GetLease)
	if err != nil {
		return nil, err
	}
	return resp.GetLease(), nil
}

// RetryJob queues a dead job again with a fresh attempt budget; its next
// lease, as any, has a larger token. A job that is not dead fails with
// ErrJobNotDead (so may a retry of a call whose first attempt did it), an
// unknown one with ErrNotFound, a cluster with a voter below level 6 with
// ErrUpgradeRequired.
func (c *Client) RetryJob(ctx context.Context, id, reason string) (*leaseholdv1.Job, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.RetryJobRequest{Id: id, Reason: reason}, jobSvc, jobsAPI.RetryJob)
	if err != nil {
		return nil, err
	}
	return resp.GetJob(), nil
}

// PurgeJobs removes dead jobs: req.Ids, or those of req.Queue and/or dead
// for longer than req.OlderThan, at most req.Limit (0: 1000) per call. It
// is one call: while the answer's More is set, call again. A listed id not
// purged (unknown, or not dead) comes back in Skipped.
func (c *Client) PurgeJobs(ctx context.Context, req *leaseholdv1.PurgeJobsRequest) (*leaseholdv1.PurgeJobsResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("leasehold: purge: %w: nil request", ErrInvalidArgument)
	}
	return unary(ctx, c, callOpts{}, req, jobSvc, jobsAPI.PurgeJobs)
}
