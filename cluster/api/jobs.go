package api

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

type jobService struct{ s *Server }

// apply proposes the command a write request translates to.
func (s *Server) apply(ctx context.Context, m proto.Message) (any, error) {
	cmd, ok := commandOf(m)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a write", fsm.ErrInvalidArgument, m)
	}
	return s.node.Apply(ctx, cmd)
}

// read returns the state to read from: after a read barrier on the leader,
// or as it is here with CONSISTENCY_STALE. A follower asked for a
// linearizable read returns the leader's clients to forward to instead.
func (s *Server) read(ctx context.Context, h http.Header, c pb.Consistency) (*fsm.FSM, *peerClients, error) {
	f, err := s.node.State(ctx, c == pb.Consistency_CONSISTENCY_STALE)
	if p := s.leaderFor(ctx, err); p != nil {
		return nil, p, nil
	}
	return f, nil, toWire(err)
}

func (j jobService) SubmitJob(ctx context.Context, req *connect.Request[pb.SubmitJobRequest]) (*connect.Response[pb.SubmitJobResponse], error) {
	v, err := j.s.apply(ctx, req.Msg)
	if p := j.s.leaderFor(ctx, err); p != nil {
		return forward(ctx, req, p.jobs.SubmitJob)
	}
	if err != nil {
		return nil, toWire(err)
	}
	r := v.(fsm.SubmitResult)
	return connect.NewResponse(&pb.SubmitJobResponse{Job: jobToProto(&r.Job), Created: r.Created}), nil
}

func (j jobService) GetJob(ctx context.Context, req *connect.Request[pb.GetJobRequest]) (*connect.Response[pb.GetJobResponse], error) {
	f, p, err := j.s.read(ctx, req.Header(), req.Msg.GetConsistency())
	if p != nil {
		return forward(ctx, req, p.jobs.GetJob)
	}
	if err != nil {
		return nil, err
	}
	job, err := f.Job(req.Msg.GetId())
	if err != nil {
		return nil, toWire(err)
	}
	return connect.NewResponse(&pb.GetJobResponse{Job: jobToProto(&job)}), nil
}

func (j jobService) ListJobs(ctx context.Context, req *connect.Request[pb.ListJobsRequest]) (*connect.Response[pb.ListJobsResponse], error) {
	m := req.Msg
	if _, ok := pb.JobState_name[int32(m.GetState())]; !ok {
		return nil, toWire(fmt.Errorf("%w: state %d", fsm.ErrInvalidArgument, m.GetState()))
	}
	f, p, err := j.s.read(ctx, req.Header(), m.GetConsistency())
	if p != nil {
		return forward(ctx, req, p.jobs.ListJobs)
	}
	if err != nil {
		return nil, err
	}
	jobs, next := f.Jobs(fsm.JobFilter{
		Queue: m.GetQueue(), Kind: m.GetKind(), Submitter: m.GetSubmitter(), WorkerID: m.GetWorkerId(),
		State: fsm.JobState(m.GetState()), AfterSeq: m.GetPageToken(), Limit: int(m.GetPageSize()),
	})
	res := &pb.ListJobsResponse{NextPageToken: next}
	for i := range jobs {
		res.Jobs = append(res.Jobs, jobToProto(&jobs[i]))
	}
	return connect.NewResponse(res), nil
}

func (j jobService) CancelJob(ctx context.Context, req *connect.Request[pb.CancelJobRequest]) (*connect.Response[pb.CancelJobResponse], error) {
	v, err := j.s.apply(ctx, req.Msg)
	if p := j.s.leaderFor(ctx, err); p != nil {
		return forward(ctx, req, p.jobs.CancelJob)
	}
	if err != nil {
		return nil, toWire(err)
	}
	r := v.(fsm.CancelResult)
	return connect.NewResponse(&pb.CancelJobResponse{Job: jobToProto(&r.Job), Revoked: r.Revoked}), nil
}

func (j jobService) CancelSubmitterJobs(ctx context.Context, req *connect.Request[pb.CancelSubmitterJobsRequest]) (*connect.Response[pb.CancelSubmitterJobsResponse], error) {
	v, err := j.s.apply(ctx, req.Msg)
	if p := j.s.leaderFor(ctx, err); p != nil {
		return forward(ctx, req, p.jobs.CancelSubmitterJobs)
	}
	if err != nil {
		return nil, toWire(err)
	}
	r := v.(fsm.CancelSubmitterResult)
	j.s.node.AuditAsync(auditRecord(identityOf(ctx), "jobs.cancel_submitter",
		fmt.Sprintf("submitter %q: %d cancelled, %d remaining", req.Msg.GetSubmitter(), len(r.Cancelled), r.Remaining)))
	return connect.NewResponse(&pb.CancelSubmitterJobsResponse{Cancelled: r.Cancelled, Remaining: uint32(r.Remaining)}), nil
}

// CheckFence is always linearizable: a downstream store relies on it.
func (j jobService) CheckFence(ctx context.Context, req *connect.Request[pb.CheckFenceRequest]) (*connect.Response[pb.CheckFenceResponse], error) {
	if err := (&fsm.Start{WorkerID: "fence", JobID: req.Msg.GetJobId(), Token: req.Msg.GetToken()}).Validate(); err != nil {
		return nil, toWire(err)
	}
	f, p, err := j.s.read(ctx, req.Header(), pb.Consistency_CONSISTENCY_LINEARIZABLE)
	if p != nil {
		return forward(ctx, req, p.jobs.CheckFence)
	}
	if err != nil {
		return nil, err
	}
	r := f.Fence(req.Msg.GetJobId(), req.Msg.GetToken())
	if !fenceCheck {
		r.Current = true
	}
	return connect.NewResponse(&pb.CheckFenceResponse{
		Current: r.Current, CurrentToken: r.CurrentToken, State: pb.JobState(r.State), CheckedAt: timestamppb.Now(),
	}), nil
}

func (j jobService) GetLease(ctx context.Context, req *connect.Request[pb.GetLeaseRequest]) (*connect.Response[pb.GetLeaseResponse], error) {
	f, p, err := j.s.read(ctx, req.Header(), req.Msg.GetConsistency())
	if p != nil {
		return forward(ctx, req, p.jobs.GetLease)
	}
	if err != nil {
		return nil, err
	}
	l, err := f.Lease(req.Msg.GetToken())
	if err != nil {
		return nil, toWire(err)
	}
	return connect.NewResponse(&pb.GetLeaseResponse{Lease: leaseToProto(&l)}), nil
}
