package api

import (
	"context"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

type workerService struct{ s *Server }

func (w workerService) timings() *pb.Timings {
	return timingsToProto(w.s.node.Timings())
}

func (w workerService) RegisterWorker(ctx context.Context, req *connect.Request[pb.RegisterWorkerRequest]) (*connect.Response[pb.RegisterWorkerResponse], error) {
	v, err := w.s.apply(ctx, req.Msg)
	if p := w.s.leaderFor(ctx, err); p != nil {
		return forward(ctx, req, p.workers.RegisterWorker)
	}
	if err != nil {
		return nil, toWire(err)
	}
	wk := v.(fsm.Worker)
	return connect.NewResponse(&pb.RegisterWorkerResponse{Worker: workerToProto(&wk), Timings: w.timings()}), nil
}

func (w workerService) DeregisterWorker(ctx context.Context, req *connect.Request[pb.DeregisterWorkerRequest]) (*connect.Response[pb.DeregisterWorkerResponse], error) {
	v, err := w.s.apply(ctx, req.Msg)
	if p := w.s.leaderFor(ctx, err); p != nil {
		return forward(ctx, req, p.workers.DeregisterWorker)
	}
	if err != nil {
		return nil, toWire(err)
	}
	return connect.NewResponse(&pb.DeregisterWorkerResponse{Released: refsToProto(v.(fsm.DeregisterResult).Released)}), nil
}

func (w workerService) Acquire(ctx context.Context, req *connect.Request[pb.AcquireRequest]) (*connect.Response[pb.AcquireResponse], error) {
	cmd, _ := commandOf(req.Msg)
	res, err := w.s.node.Acquire(ctx, *cmd.(*fsm.Acquire), waitOf(req.Msg.GetWait()))
	if p := w.s.leaderFor(ctx, err); p != nil {
		return forward(ctx, req, p.workers.Acquire)
	}
	if err != nil {
		return nil, toWire(err)
	}
	return connect.NewResponse(&pb.AcquireResponse{Grants: grantsToProto(res.Grants), Replayed: res.Replayed}), nil
}

func (w workerService) StartLease(ctx context.Context, req *connect.Request[pb.StartLeaseRequest]) (*connect.Response[pb.StartLeaseResponse], error) {
	v, err := w.s.apply(ctx, req.Msg)
	if p := w.s.leaderFor(ctx, err); p != nil {
		return forward(ctx, req, p.workers.StartLease)
	}
	if err != nil {
		return nil, toWire(err)
	}
	l := v.(fsm.Lease)
	return connect.NewResponse(&pb.StartLeaseResponse{Lease: leaseToProto(&l)}), nil
}

func (w workerService) Heartbeat(ctx context.Context, req *connect.Request[pb.HeartbeatRequest]) (*connect.Response[pb.HeartbeatResponse], error) {
	res, err := w.s.node.Heartbeat(ctx, req.Msg.GetWorkerId(), refsFromProto(req.Msg.GetLeases()))
	if p := w.s.leaderFor(ctx, err); p != nil {
		return forward(ctx, req, p.workers.Heartbeat)
	}
	if err != nil {
		return nil, toWire(err)
	}
	out := &pb.HeartbeatResponse{Timings: w.timings()}
	for _, st := range res.Leases {
		out.Leases = append(out.Leases, &pb.LeaseStatus{
			JobId: st.JobID, Token: st.Token, Verdict: verdictToProto(st.Verdict), Revoke: pb.Revoke(st.Revoke),
		})
	}
	for i := range res.Unnamed {
		out.Unnamed = append(out.Unnamed, leaseToProto(&res.Unnamed[i]))
	}
	return connect.NewResponse(out), nil
}

func verdictToProto(v cluster.Verdict) pb.Verdict {
	switch v {
	case cluster.VerdictKeep:
		return pb.Verdict_VERDICT_KEEP
	case cluster.VerdictStop:
		return pb.Verdict_VERDICT_STOP
	}
	return pb.Verdict_VERDICT_LOST
}

func (w workerService) Report(ctx context.Context, req *connect.Request[pb.ReportRequest]) (*connect.Response[pb.ReportResponse], error) {
	v, err := w.s.apply(ctx, req.Msg)
	if p := w.s.leaderFor(ctx, err); p != nil {
		return forward(ctx, req, p.workers.Report)
	}
	if err != nil {
		return nil, toWire(err)
	}
	r := v.(fsm.ReportResult)
	return connect.NewResponse(&pb.ReportResponse{
		JobId: r.JobID, Token: r.Token, Outcome: pb.Outcome(r.Outcome), State: pb.JobState(r.State), Requeued: r.Requeued,
	}), nil
}

func (w workerService) Release(ctx context.Context, req *connect.Request[pb.ReleaseRequest]) (*connect.Response[pb.ReleaseResponse], error) {
	v, err := w.s.apply(ctx, req.Msg)
	if p := w.s.leaderFor(ctx, err); p != nil {
		return forward(ctx, req, p.workers.Release)
	}
	if err != nil {
		return nil, toWire(err)
	}
	j := v.(fsm.Job)
	return connect.NewResponse(&pb.ReleaseResponse{Job: jobToProto(&j)}), nil
}

func (w workerService) ListLeases(ctx context.Context, req *connect.Request[pb.ListLeasesRequest]) (*connect.Response[pb.ListLeasesResponse], error) {
	if err := fsm.ValidateHeld(req.Msg.GetWorkerId(), nil); err != nil {
		return nil, toWire(err)
	}
	f, p, err := w.s.read(ctx, req.Header(), req.Msg.GetConsistency())
	if p != nil {
		return forward(ctx, req, p.workers.ListLeases)
	}
	if err != nil {
		return nil, err
	}
	out := &pb.ListLeasesResponse{}
	for _, l := range f.WorkerLeases(req.Msg.GetWorkerId()) {
		j, err := f.Job(l.JobID)
		if err != nil {
			continue // ended between the two reads
		}
		out.Leases = append(out.Leases, &pb.Grant{Job: jobToProto(&j), Lease: leaseToProto(&l)})
	}
	return connect.NewResponse(out), nil
}

func (w workerService) ListWorkers(ctx context.Context, req *connect.Request[pb.ListWorkersRequest]) (*connect.Response[pb.ListWorkersResponse], error) {
	f, p, err := w.s.read(ctx, req.Header(), req.Msg.GetConsistency())
	if p != nil {
		return forward(ctx, req, p.workers.ListWorkers)
	}
	if err != nil {
		return nil, err
	}
	out := &pb.ListWorkersResponse{}
	for _, wk := range f.Workers() {
		out.Workers = append(out.Workers, workerToProto(&wk))
	}
	return connect.NewResponse(out), nil
}
