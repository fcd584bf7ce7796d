package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// RegisterWorker registers a worker, or updates its capacity and version
// (Config.WorkerVersion). The answer carries the cluster's timings, which
// the worker must heartbeat by. A server from before worker versions
// refuses the field it does not know; the worker is then registered
// without it.
func (c *Client) RegisterWorker(ctx context.Context, id string, capacity uint32) (*leaseholdv1.RegisterWorkerResponse, error) {
	req := &leaseholdv1.RegisterWorkerRequest{WorkerId: id, Capacity: capacity, Version: c.cfg.WorkerVersion}
	resp, err := unary(ctx, c, callOpts{}, req, workerSvc, workersAPI.RegisterWorker)
	if req.Version != "" && refusedVersionField(err) {
		req.Version = ""
		return unary(ctx, c, callOpts{}, req, workerSvc, workersAPI.RegisterWorker)
	}
	return resp, err
}

// refusedVersionField reports whether err is a strict server's refusal of
// RegisterWorkerRequest.version as an unknown field (by its number in
// binary, by its name in JSON).
func refusedVersionField(err error) bool { return refusedField(err, "3", "version") }

// refusedField reports whether err is a strict server's refusal of a
// request's field as unknown (by its number in binary, by its name in
// JSON): a node of a build from before the field.
func refusedField(err error, number, name string) bool {
	var e *Error
	return errors.As(err, &e) && e.Reason == transport.ReasonInvalidArgument && (e.Field == number || e.Field == name) &&
		strings.Contains(e.Message, "unknown field")
}

// DeregisterWorker removes a worker and releases its live leases (each job
// queued again at once, no attempt used), which it returns.
func (c *Client) DeregisterWorker(ctx context.Context, id string) ([]*leaseholdv1.LeaseRef, error) {
	return c.deregister(ctx, &leaseholdv1.DeregisterWorkerRequest{WorkerId: id})
}

// DeregisterLostWorker removes a worker that is gone and settles its live
// leases as a lost worker's, as their expiry would: a loss counted, then by
// each job's on_worker_lost policy (run-style: lost; evaluation-style:
// queued again). It returns the leases ended.
func (c *Client) DeregisterLostWorker(ctx context.Context, id string) ([]*leaseholdv1.LeaseRef, error) {
	return c.deregister(ctx, &leaseholdv1.DeregisterWorkerRequest{WorkerId: id, Lost: true})
}

func (c *Client) deregister(ctx context.Context, req *leaseholdv1.DeregisterWorkerRequest) ([]*leaseholdv1.LeaseRef, error) {
	resp, err := unary(ctx, c, callOpts{}, req, workerSvc, workersAPI.DeregisterWorker)
	if err != nil {
		return nil, err
	}
	return resp.GetReleased(), nil
}

// Acquire takes up to req.Max leases, waiting up to req.Wait for a job.
// An empty req.RequestId is filled with a random id before the first
// attempt (and written into req): every retry of this call, and a caller's
// own retry with the same req, gets the first answer, never a second lease.
// The call's deadline covers the wait on top of the CallTimeout.
func (c *Client) Acquire(ctx context.Context, req *leaseholdv1.AcquireRequest) (*leaseholdv1.AcquireResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("leasehold: acquire: %w: nil request", ErrInvalidArgument)
	}
	if req.RequestId == "" {
		req.RequestId = newID()
	}
	return unary(ctx, c, callOpts{wait: req.GetWait().AsDuration()}, req, workerSvc, workersAPI.Acquire)
}

// Start marks an acquired lease running.
func (c *Client) Start(ctx context.Context, workerID, jobID string, token uint64) (*leaseholdv1.Lease, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.StartLeaseRequest{WorkerId: workerID, JobId: jobID, Token: token},
		workerSvc, workersAPI.StartLease)
	if err != nil {
		return nil, err
	}
	return resp.GetLease(), nil
}

// Heartbeat renews every lease of a worker, naming the ones it holds, and
// answers per lease: keep, stop (revoked) or lost; plus the live leases it
// did not name. The Worker runtime sends these; most callers never do.
// Notes, at most one per lease named, are sent only to a server whose
// answer to an earlier heartbeat set NotesHeard (an older one refuses
// them with ErrInvalidArgument).
func (c *Client) Heartbeat(ctx context.Context, workerID string, leases []*leaseholdv1.LeaseRef, notes ...*leaseholdv1.ProgressNote) (*leaseholdv1.HeartbeatResponse, error) {
	return c.heartbeat(ctx, workerID, leases, notes, 0)
}

// heartbeat bounds each attempt by perAttempt (CallTimeout when zero). The
// runtime passes half a renew: a node that has not answered by then is
// left for another while this heartbeat can still count.
func (c *Client) heartbeat(ctx context.Context, workerID string, leases []*leaseholdv1.LeaseRef, notes []*leaseholdv1.ProgressNote, perAttempt time.Duration) (*leaseholdv1.HeartbeatResponse, error) {
	return unary(ctx, c, callOpts{attempt: perAttempt}, &leaseholdv1.HeartbeatRequest{WorkerId: workerID, Leases: leases, Notes: notes},
		workerSvc, workersAPI.Heartbeat)
}

// Report ends a lease with its outcome. An empty req.ReportId is filled with
// a random id before the first attempt (and written into req), so a retry,
// even one that lands on a new leader, gets the first report's answer.
// ErrStaleToken means the lease had already ended; the server keeps the
// report as a lease.stale_report event.
//
// With req.Next set, the same call then acquires for the worker (an empty
// Next.WorkerId is the report's worker; an empty Next.RequestId is filled
// like Acquire's), and the answer's Next carries its grants: one call per
// job instead of two. The call's deadline covers Next's wait. A refused
// report makes no acquire, but in one race (the lease ended just as the
// report arrived) a grant the server already made is listed among the
// worker's unnamed leases at its next heartbeat (the Worker runtime
// releases it). A server from before Next refuses the field
// having applied nothing; the report is then sent alone, the answer has no
// Next (acquire apart), and for the next minute this client sends reports
// without Next.
func (c *Client) Report(ctx context.Context, req *leaseholdv1.ReportRequest) (*leaseholdv1.ReportResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("leasehold: report: %w: nil request", ErrInvalidArgument)
	}
	if req.ReportId == "" {
		req.ReportId = newID()
	}
	next := req.Next
	if next == nil {
		return unary(ctx, c, callOpts{}, req, workerSvc, workersAPI.Report)
	}
	if next.RequestId == "" {
		next.RequestId = newID()
	}
	if at := c.nextRefused.Load(); at != 0 && time.Since(time.Unix(0, at)) < nextRetry {
		return c.reportAlone(ctx, req)
	}
	resp, err := unary(ctx, c, callOpts{wait: next.GetWait().AsDuration()}, req, workerSvc, workersAPI.Report)
	if err != nil && refusedField(err, "10", "next") {
		c.nextRefused.Store(time.Now().UnixNano())
		return c.reportAlone(ctx, req)
	}
	return resp, err
}

// nextRetry is how long a client that saw ReportRequest.next refused sends
// reports without it before it tries again (a rolling upgrade may have
// replaced the node meanwhile).
const nextRetry = time.Minute

// reportAlone sends req without its Next, leaving req as it was.
func (c *Client) reportAlone(ctx context.Context, req *leaseholdv1.ReportRequest) (*leaseholdv1.ReportResponse, error) {
	alone := proto.Clone(req).(*leaseholdv1.ReportRequest)
	alone.Next = nil
	return unary(ctx, c, callOpts{}, alone, workerSvc, workersAPI.Report)
}

// Release gives a lease back: the job is queued again at once and no
// attempt is counted.
//
// A release carries no idempotency key: repeated after an attempt that may
// have taken effect (the connection broke after sending, the outcome was
// unknown), it is refused STALE_TOKEN because the first one ended the
// lease. That refusal is then returned as ErrOutcomeUnknown: the lease is
// over either way, but whether this release ended it is not known.
func (c *Client) Release(ctx context.Context, workerID, jobID string, token uint64, reason string) (*leaseholdv1.Job, error) {
	return c.release(ctx, &leaseholdv1.ReleaseRequest{WorkerId: workerID, JobId: jobID, Token: token, Reason: reason})
}

// ReleaseAsLost ends a lease whose execution is gone (its command vanished
// with the machine) as a lost worker's lease ends: by the job's
// on_worker_lost policy, so a run-style job ends lost and never runs again,
// with a loss counted and no attempt. A cluster with a voter whose build
// cannot apply it refuses with ErrUpgradeRequired.
func (c *Client) ReleaseAsLost(ctx context.Context, workerID, jobID string, token uint64, reason string) (*leaseholdv1.Job, error) {
	return c.release(ctx, &leaseholdv1.ReleaseRequest{WorkerId: workerID, JobId: jobID, Token: token, Reason: reason, Lost: true})
}

func (c *Client) release(ctx context.Context, req *leaseholdv1.ReleaseRequest) (*leaseholdv1.Job, error) {
	maybeApplied := false
	resp, err := unary(ctx, c, callOpts{}, req,
		workerSvc, func(s workersAPI, ctx context.Context, r *connect.Request[leaseholdv1.ReleaseRequest]) (*connect.Response[leaseholdv1.ReleaseResponse], error) {
			resp, err := s.Release(ctx, r)
			if err != nil && mayHaveApplied(err) {
				maybeApplied = true
			}
			return resp, err
		})
	if err != nil {
		if maybeApplied && errors.Is(err, ErrStaleToken) {
			e := toError(err)
			return nil, &Error{Reason: transport.ReasonOutcomeUnknown, Code: e.Code,
				Message: "an earlier attempt may have released the lease; this one was refused: " + e.Message}
		}
		return nil, err
	}
	return resp.GetJob(), nil
}

// Leases lists the live leases of a worker, each with its job.
func (c *Client) Leases(ctx context.Context, workerID string, opts ...ReadOption) ([]*leaseholdv1.Grant, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.ListLeasesRequest{WorkerId: workerID, Consistency: consistency(opts)},
		workerSvc, workersAPI.ListLeases)
	if err != nil {
		return nil, err
	}
	return resp.GetLeases(), nil
}

// Worker returns one registered worker with its state, silence and leases
// as the leader knows them (a stale read on a follower: state unknown); a
// worker that is not registered is ErrNotFound.
func (c *Client) Worker(ctx context.Context, id string, opts ...ReadOption) (*leaseholdv1.Worker, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.GetWorkerRequest{WorkerId: id, Consistency: consistency(opts)},
		workerSvc, workersAPI.GetWorker)
	if err != nil {
		return nil, err
	}
	return resp.GetWorker(), nil
}

// Workers lists the registered workers, each with its state, silence and
// leases as the leader knows them (a stale read on a follower: state
// unknown).
func (c *Client) Workers(ctx context.Context, opts ...ReadOption) ([]*leaseholdv1.Worker, error) {
	resp, err := unary(ctx, c, callOpts{}, &leaseholdv1.ListWorkersRequest{Consistency: consistency(opts)},
		workerSvc, workersAPI.ListWorkers)
	if err != nil {
		return nil, err
	}
	return resp.GetWorkers(), nil
}
