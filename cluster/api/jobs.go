package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

type jobService struct{ s *Server }

func (j jobService) SubmitJob(ctx context.Context, req *connect.Request[pb.SubmitJobRequest]) (*connect.Response[pb.SubmitJobResponse], error) {
	return leaderCall(j.s, ctx, req, jobsOf, jobsAPI.SubmitJob, func(ctx context.Context) (*pb.SubmitJobResponse, error) {
		r, err := applyAs[fsm.SubmitResult](j.s, ctx, req.Msg, func(m *pb.SubmitJobRequest) (*fsm.SubmitJob, error) {
			cmd, err := submitOf(m, j.s.node.Wall())
			if err != nil {
				return nil, err
			}
			// No policy named: the default, once every voter applies it
			// (before, a retry comes at once, as it always did).
			if m.GetSpec().Retry == nil && j.s.node.ClusterLevel() >= 5 {
				cmd.Spec.Retry = DefaultRetry()
			}
			// A submitter credential's jobs are its own: an empty
			// submitter is its name, another name is refused.
			if id := identityOf(ctx); id.Role == RoleSubmitter && id.Submitter != "*" && cmd.Spec.Submitter == "" {
				cmd.Spec.Submitter = id.Submitter
			}
			return cmd, j.s.actAsSubmitter(ctx, cmd.Spec.Submitter)
		})
		if err != nil {
			return nil, err
		}
		return &pb.SubmitJobResponse{Job: jobToProto(&r.Job, j.s.node.Wall()), Created: r.Created}, nil
	})
}

func (j jobService) GetJob(ctx context.Context, req *connect.Request[pb.GetJobRequest]) (*connect.Response[pb.GetJobResponse], error) {
	if err := rules.CheckID("id", req.Msg.GetId()); err != nil {
		return nil, toWire(err)
	}
	return readCall(j.s, ctx, req, req.Msg.GetConsistency(), jobsOf, jobsAPI.GetJob, func(_ context.Context, f *fsm.FSM) (*pb.GetJobResponse, error) {
		job, err := f.Job(req.Msg.GetId())
		if err != nil {
			return nil, err
		}
		out := jobToProto(&job, j.s.node.Wall())
		// Progress notes live in the leader's memory: a stale read on a
		// follower answers without one.
		if l, ok := job.CurrentLease(); ok {
			if p, ok := j.s.node.Progress(job.ID, l.Token); ok {
				out.Progress, out.ProgressAt = p.Note, timestamppb.New(p.Heard)
			}
		}
		return &pb.GetJobResponse{Job: out}, nil
	})
}

func (j jobService) ListJobs(ctx context.Context, req *connect.Request[pb.ListJobsRequest]) (*connect.Response[pb.ListJobsResponse], error) {
	m := req.Msg
	if err := checkJobFilter(m); err != nil {
		return nil, toWire(err)
	}
	return readCall(j.s, ctx, req, m.GetConsistency(), jobsOf, jobsAPI.ListJobs, func(_ context.Context, f *fsm.FSM) (*pb.ListJobsResponse, error) {
		flt := fsm.JobFilter{
			Queue: m.GetQueue(), Kind: m.GetKind(), Submitter: m.GetSubmitter(), WorkerID: m.GetWorkerId(),
			State: stateFromProto(m.GetState()), AfterSeq: m.GetPageToken(), Limit: int(m.GetPageSize()),
		}
		// Scheduled and queued split the stored queued state by this
		// node's clock, as jobToProto shows them.
		now := j.s.node.Wall()
		switch m.GetState() {
		case pb.JobState_JOB_STATE_SCHEDULED:
			flt.State, flt.ScheduledAfter = fsm.JobQueued, now.UnixNano()
		case pb.JobState_JOB_STATE_QUEUED:
			flt.DueBy = now.UnixNano()
		}
		jobs, next := f.Jobs(flt)
		res := &pb.ListJobsResponse{NextPageToken: next}
		for i := range jobs {
			res.Jobs = append(res.Jobs, jobToProto(&jobs[i], now))
		}
		return res, nil
	})
}

func (j jobService) CancelJob(ctx context.Context, req *connect.Request[pb.CancelJobRequest]) (*connect.Response[pb.CancelJobResponse], error) {
	return leaderCall(j.s, ctx, req, jobsOf, jobsAPI.CancelJob, func(ctx context.Context) (*pb.CancelJobResponse, error) {
		if err := j.actOnJobs(ctx, req.Msg.GetId()); err != nil {
			return nil, err
		}
		r, err := applyAs[fsm.CancelResult](j.s, ctx, req.Msg, cancelOf)
		if err != nil {
			return nil, err
		}
		return &pb.CancelJobResponse{Job: jobToProto(&r.Job, j.s.node.Wall()), Revoked: r.Revoked}, nil
	})
}

func (j jobService) CancelSubmitterJobs(ctx context.Context, req *connect.Request[pb.CancelSubmitterJobsRequest]) (*connect.Response[pb.CancelSubmitterJobsResponse], error) {
	return leaderCall(j.s, ctx, req, jobsOf, jobsAPI.CancelSubmitterJobs, func(ctx context.Context) (*pb.CancelSubmitterJobsResponse, error) {
		if err := j.s.actAsSubmitter(ctx, req.Msg.GetSubmitter()); err != nil {
			return nil, err
		}
		r, err := applyAs[fsm.CancelSubmitterResult](j.s, ctx, req.Msg, cancelSubmitterOf)
		if err != nil {
			return nil, err
		}
		j.s.node.AuditAsync(auditRecord(identityOf(ctx), "jobs.cancel_submitter",
			fmt.Sprintf("submitter %q: %d cancelled, %d remaining", req.Msg.GetSubmitter(), len(r.Cancelled), r.Remaining)))
		return &pb.CancelSubmitterJobsResponse{Cancelled: r.Cancelled, Remaining: uint32(r.Remaining)}, nil
	})
}

// RetryJob is authorised as a cancel is: the job's submitter must be one
// the caller may act as.
func (j jobService) RetryJob(ctx context.Context, req *connect.Request[pb.RetryJobRequest]) (*connect.Response[pb.RetryJobResponse], error) {
	return leaderCall(j.s, ctx, req, jobsOf, jobsAPI.RetryJob, func(ctx context.Context) (*pb.RetryJobResponse, error) {
		if err := j.actOnJobs(ctx, req.Msg.GetId()); err != nil {
			return nil, err
		}
		r, err := applyAs[fsm.Job](j.s, ctx, req.Msg, retryOf)
		if err != nil {
			return nil, err
		}
		return &pb.RetryJobResponse{Job: jobToProto(&r, j.s.node.Wall())}, nil
	})
}

// PurgeJobs by ids is authorised per job, as a cancel is; by queue or age
// it reaches every submitter's jobs, so it needs an admin or a submitter
// credential for "*".
func (j jobService) PurgeJobs(ctx context.Context, req *connect.Request[pb.PurgeJobsRequest]) (*connect.Response[pb.PurgeJobsResponse], error) {
	return leaderCall(j.s, ctx, req, jobsOf, jobsAPI.PurgeJobs, func(ctx context.Context) (*pb.PurgeJobsResponse, error) {
		cmd, err := purgeOf(req.Msg)
		if err != nil {
			return nil, err
		}
		if len(cmd.JobIDs) > 0 {
			err = j.actOnJobs(ctx, cmd.JobIDs...)
		} else {
			err = j.s.actAsEverySubmitter(ctx, "a purge by queue or age; name the job ids")
		}
		if err != nil {
			return nil, err
		}
		r, err := applyAs[fsm.PurgeResult](j.s, ctx, req.Msg, func(*pb.PurgeJobsRequest) (*fsm.PurgeJobs, error) { return cmd, nil })
		if err != nil {
			return nil, err
		}
		if len(r.Purged) > 0 {
			j.s.node.AuditAsync(auditRecord(identityOf(ctx), "jobs.purge", fmt.Sprintf("%d dead jobs purged", len(r.Purged))))
		}
		return &pb.PurgeJobsResponse{Purged: r.Purged, Skipped: r.Skipped, More: r.More}, nil
	})
}

// actOnJobs refuses a call on jobs of a submitter the caller may not act
// as. A job's submitter never changes, so any replica's copy tells whose
// it is; one this node has not seen yet is checked by the leader, where
// the request goes.
func (j jobService) actOnJobs(ctx context.Context, ids ...string) error {
	f := j.s.node.FSM()
	for _, id := range ids {
		if job, err := f.Job(id); err == nil {
			if err := j.s.actAsSubmitter(ctx, job.Submitter); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckFence is always linearizable: a downstream store relies on it.
func (j jobService) CheckFence(ctx context.Context, req *connect.Request[pb.CheckFenceRequest]) (*connect.Response[pb.CheckFenceResponse], error) {
	if err := firstError(rules.CheckID("job_id", req.Msg.GetJobId()), rules.CheckToken("token", req.Msg.GetToken())); err != nil {
		return nil, toWire(err)
	}
	return readCall(j.s, ctx, req, pb.Consistency_CONSISTENCY_LINEARIZABLE, jobsOf, jobsAPI.CheckFence, func(_ context.Context, f *fsm.FSM) (*pb.CheckFenceResponse, error) {
		r := f.Fence(req.Msg.GetJobId(), req.Msg.GetToken())
		if !fenceCheck {
			r.Current = true
		}
		return &pb.CheckFenceResponse{
			Current: r.Current, CurrentToken: r.CurrentToken, State: stateToProto(r.State), CheckedAt: timestamppb.Now(),
		}, nil
	})
}

func (j jobService) GetLease(ctx context.Context, req *connect.Request[pb.GetLeaseRequest]) (*connect.Response[pb.GetLeaseResponse], error) {
	if err := rules.CheckToken("token", req.Msg.GetToken()); err != nil {
		return nil, toWire(err)
	}
	return readCall(j.s, ctx, req, req.Msg.GetConsistency(), jobsOf, jobsAPI.GetLease, func(_ context.Context, f *fsm.FSM) (*pb.GetLeaseResponse, error) {
		l, err := f.Lease(req.Msg.GetToken())
		if err != nil {
			return nil, err
		}
		return &pb.GetLeaseResponse{Lease: leaseToProto(l.JobID, &l.Lease)}, nil
	})
}

// checkJobFilter refuses a list filter no job could match because it breaks
// its field's rule, and a state the API does not name.
func checkJobFilter(m *pb.ListJobsRequest) error {
	if _, ok := pb.JobState_name[int32(m.GetState())]; !ok {
		return rules.Invalid("state", "unknown value %d", m.GetState())
	}
	return firstError(
		optional(rules.CheckName, "queue", m.GetQueue()),
		optional(rules.CheckName, "kind", m.GetKind()),
		rules.CheckOptionalID("submitter", m.GetSubmitter()),
		rules.CheckOptionalID("worker_id", m.GetWorkerId()),
	)
}

// optional applies check to a field that may be empty.
func optional(check func(field, s string) error, field, s string) error {
	if s == "" {
		return nil
	}
	return check(field, s)
}
