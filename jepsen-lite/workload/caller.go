package workload

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/jepsen-lite/history"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Caller makes client calls on behalf of one process of the history and
// records each as an operation: invoke before it is sent, complete with
// its answer. Every call is bounded by Timeout: one that runs out ends
// info (its outcome unknown). Safe for concurrent use.
type Caller struct {
	Rec     *history.Recorder
	Process string
	Client  *client.Client
	Timeout time.Duration
}

func (c *Caller) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, c.Timeout)
}

// Submit submits spec, to run no earlier than runIn from when the leader
// takes it (0: at once).
func (c *Caller) Submit(ctx context.Context, spec *leaseholdv1.JobSpec, runIn time.Duration) (*leaseholdv1.Job, bool, error) {
	id := c.Rec.Invoke(c.Process, history.OpSubmit, history.Input{JobID: spec.GetId(), Queue: spec.GetQueue(),
		Kind: spec.GetKind(), Priority: spec.GetPriority(), Submitter: spec.GetSubmitter(), RunInNs: int64(runIn),
		TimeoutNs: int64(spec.GetTimeout().AsDuration())})
	cctx, cancel := c.ctx(ctx)
	defer cancel()
	var opts []client.SubmitOption
	if runIn > 0 {
		opts = append(opts, client.RunIn(runIn))
	}
	job, created, err := c.Client.Submit(cctx, spec, opts...)
	out := JobOutput(job)
	out.Created = created
	c.Rec.CompleteErr(id, err, out)
	return job, created, err
}

// Cancel cancels (or with kill, kills) a job.
func (c *Caller) Cancel(ctx context.Context, jobID string, kill bool, reason string) (*leaseholdv1.Job, bool, error) {
	op := history.OpCancel
	if kill {
		op = history.OpKill
	}
	id := c.Rec.Invoke(c.Process, op, history.Input{JobID: jobID, Reason: reason})
	cctx, cancel := c.ctx(ctx)
	defer cancel()
	job, revoked, err := c.Client.Cancel(cctx, jobID, kill, reason)
	out := JobOutput(job)
	out.Revoked = revoked
	c.Rec.CompleteErr(id, err, out)
	return job, revoked, err
}

// GetJob reads a job, linearizably unless stale.
func (c *Caller) GetJob(ctx context.Context, jobID string, stale bool) (*leaseholdv1.Job, error) {
	id := c.Rec.Invoke(c.Process, history.OpGetJob, history.Input{JobID: jobID, Stale: stale})
	cctx, cancel := c.ctx(ctx)
	defer cancel()
	var opts []client.ReadOption
	if stale {
		opts = append(opts, client.Stale())
	}
	job, err := c.Client.Job(cctx, jobID, opts...)
	c.Rec.CompleteErr(id, err, JobOutput(job))
	return job, err
}

// Fence asks whether token is jobID's live lease.
func (c *Caller) Fence(ctx context.Context, jobID string, token uint64) (*leaseholdv1.CheckFenceResponse, error) {
	id := c.Rec.Invoke(c.Process, history.OpFenceCheck, history.Input{JobID: jobID, Token: token})
	cctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.Client.Fence(cctx, jobID, token)
	c.Rec.CompleteErr(id, err, &history.Output{Current: resp.GetCurrent(), CurrentToken: resp.GetCurrentToken(),
		State: history.JobStateOf(resp.GetState())})
	return resp, err
}

// Register registers a worker.
func (c *Caller) Register(ctx context.Context, workerID string, capacity uint32) error {
	id := c.Rec.Invoke(c.Process, history.OpRegister, history.Input{WorkerID: workerID})
	cctx, cancel := c.ctx(ctx)
	defer cancel()
	_, err := c.Client.RegisterWorker(cctx, workerID, capacity)
	c.Rec.CompleteErr(id, err, &history.Output{})
	return err
}

// Acquire takes leases; req.RequestId must be set (a retry reuses it).
func (c *Caller) Acquire(ctx context.Context, req *leaseholdv1.AcquireRequest) (*leaseholdv1.AcquireResponse, error) {
	id := c.Rec.Invoke(c.Process, history.OpAcquire, AcquireInput(req))
	cctx, cancel := context.WithTimeout(ctx, c.Timeout+req.GetWait().AsDuration())
	defer cancel()
	resp, err := c.Client.Acquire(cctx, req)
	c.Rec.CompleteErr(id, err, OutputOf(resp))
	return resp, err
}

// Heartbeat renews a worker's leases.
func (c *Caller) Heartbeat(ctx context.Context, workerID string, refs []*leaseholdv1.LeaseRef) (*leaseholdv1.HeartbeatResponse, error) {
	id := c.Rec.Invoke(c.Process, history.OpHeartbeat, history.Input{WorkerID: workerID, Leases: leaseRefs(refs)})
	cctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.Client.Heartbeat(cctx, workerID, refs)
	c.Rec.CompleteErr(id, err, OutputOf(resp))
	return resp, err
}

// Report reports; req.ReportId must be set.
func (c *Caller) Report(ctx context.Context, req *leaseholdv1.ReportRequest) (*leaseholdv1.ReportResponse, error) {
	id := c.Rec.Invoke(c.Process, history.OpReport, ReportInput(req))
	cctx, cancel := c.ctx(ctx)
	defer cancel()
	resp, err := c.Client.Report(cctx, req)
	c.Rec.CompleteErr(id, err, OutputOf(resp))
	return resp, err
}

// Release gives a lease back.
func (c *Caller) Release(ctx context.Context, workerID, jobID string, token uint64, reason string) (*leaseholdv1.Job, error) {
	id := c.Rec.Invoke(c.Process, history.OpRelease, history.Input{WorkerID: workerID, JobID: jobID, Token: token, Reason: reason})
	cctx, cancel := c.ctx(ctx)
	defer cancel()
	job, err := c.Client.Release(cctx, workerID, jobID, token, reason)
	c.Rec.CompleteErr(id, err, JobOutput(job))
	return job, err
}
