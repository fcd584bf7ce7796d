package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

type workerService struct{ s *Server }

func (w workerService) timings() *pb.Timings { return w.s.timingsPB }

func (w workerService) RegisterWorker(ctx context.Context, req *connect.Request[pb.RegisterWorkerRequest]) (*connect.Response[pb.RegisterWorkerResponse], error) {
	return leaderCall(w.s, ctx, req, workersOf, workersAPI.RegisterWorker, func(ctx context.Context) (*pb.RegisterWorkerResponse, error) {
		if err := w.s.actAsWorker(ctx, req.Msg.GetWorkerId()); err != nil {
			return nil, err
		}
		wk, err := applyAs[fsm.Worker](w.s, ctx, req.Msg, registerOf)
		if err != nil {
			return nil, err
		}
		return &pb.RegisterWorkerResponse{Worker: workerToProto(&wk), Timings: w.timings()}, nil
	})
}

func (w workerService) DeregisterWorker(ctx context.Context, req *connect.Request[pb.DeregisterWorkerRequest]) (*connect.Response[pb.DeregisterWorkerResponse], error) {
	return leaderCall(w.s, ctx, req, workersOf, workersAPI.DeregisterWorker, func(ctx context.Context) (*pb.DeregisterWorkerResponse, error) {
		if err := w.s.actAsWorker(ctx, req.Msg.GetWorkerId()); err != nil {
			return nil, err
		}
		r, err := applyAs[fsm.DeregisterResult](w.s, ctx, req.Msg, deregisterOf)
		if err != nil {
			return nil, err
		}
		return &pb.DeregisterWorkerResponse{Released: refsToProto(r.Released)}, nil
	})
}

func (w workerService) Acquire(ctx context.Context, req *connect.Request[pb.AcquireRequest]) (*connect.Response[pb.AcquireResponse], error) {
	return leaderCall(w.s, ctx, req, workersOf, workersAPI.Acquire, func(ctx context.Context) (*pb.AcquireResponse, error) {
		if err := w.s.actAsWorker(ctx, req.Msg.GetWorkerId()); err != nil {
			return nil, err
		}
		cmd, err := acquireOf(req.Msg)
		if err != nil {
			return nil, err
		}
		wait, err := waitOf(req.Msg.GetWait())
		if err != nil {
			return nil, err
		}
		res, err := w.s.node.Acquire(ctx, *cmd, wait)
		if err != nil {
			return nil, err
		}
		return &pb.AcquireResponse{Grants: grantsToProto(res.Grants, w.s.node.Wall()), Replayed: res.Replayed}, nil
	})
}

func (w workerService) StartLease(ctx context.Context, req *connect.Request[pb.StartLeaseRequest]) (*connect.Response[pb.StartLeaseResponse], error) {
	return leaderCall(w.s, ctx, req, workersOf, workersAPI.StartLease, func(ctx context.Context) (*pb.StartLeaseResponse, error) {
		if err := w.s.actAsWorker(ctx, req.Msg.GetWorkerId()); err != nil {
			return nil, err
		}
		l, err := applyAs[fsm.HeldLease](w.s, ctx, req.Msg, startOf)
		if err != nil {
			return nil, err
		}
		return &pb.StartLeaseResponse{Lease: leaseToProto(l.JobID, &l.Lease)}, nil
	})
}

func (w workerService) Heartbeat(ctx context.Context, req *connect.Request[pb.HeartbeatRequest]) (*connect.Response[pb.HeartbeatResponse], error) {
	return leaderCall(w.s, ctx, req, workersOf, workersAPI.Heartbeat, func(ctx context.Context) (*pb.HeartbeatResponse, error) {
		if err := w.s.actAsWorker(ctx, req.Msg.GetWorkerId()); err != nil {
			return nil, err
		}
		res, err := w.s.node.Heartbeat(ctx, req.Msg.GetWorkerId(), refsFromProto(req.Msg.GetLeases()),
			notesFromProto(nil, req.Msg.GetNotes())...)
		if err != nil {
			return nil, err
		}
		out := &pb.HeartbeatResponse{Timings: w.timings()}
		heartbeatToProto(out, &res, nil)
		return out, nil
	})
}

func (w workerService) Report(ctx context.Context, req *connect.Request[pb.ReportRequest]) (*connect.Response[pb.ReportResponse], error) {
	return leaderCall(w.s, ctx, req, workersOf, workersAPI.Report, func(ctx context.Context) (*pb.ReportResponse, error) {
		if err := w.s.actAsWorker(ctx, req.Msg.GetWorkerId()); err != nil {
			return nil, err
		}
		if req.Msg.Next != nil {
			return w.reportNext(ctx, req.Msg)
		}
		r, err := applyAs[fsm.ReportResult](w.s, ctx, req.Msg, reportOf)
		if err != nil {
			return nil, err
		}
		return reportToProto(&r), nil
	})
}

// reportNext is a report that also asks for the worker's next lease.
func (w workerService) reportNext(ctx context.Context, m *pb.ReportRequest) (*pb.ReportResponse, error) {
	rep, err := reportOf(m)
	if err != nil {
		return nil, err
	}
	nm := m.GetNext()
	next, err := acquireOf(nm)
	if err != nil {
		return nil, fsm.InField("next", err)
	}
	if next.WorkerID == "" {
		next.WorkerID = rep.WorkerID
	}
	wait, err := waitOf(nm.GetWait())
	if err != nil {
		return nil, fsm.InField("next", err)
	}
	r, res, err := w.s.node.ReportNext(ctx, rep, *next, wait)
	if err != nil {
		return nil, err
	}
	out := reportToProto(&r)
	out.Next = &pb.AcquireResponse{Grants: grantsToProto(res.Grants, w.s.node.Wall()), Replayed: res.Replayed}
	return out, nil
}

func reportToProto(r *fsm.ReportResult) *pb.ReportResponse {
	return &pb.ReportResponse{
		JobId: r.JobID, Token: r.Token, Outcome: pb.Outcome(r.Outcome), State: stateToProto(r.State), Requeued: r.Requeued,
	}
}

func (w workerService) Release(ctx context.Context, req *connect.Request[pb.ReleaseRequest]) (*connect.Response[pb.ReleaseResponse], error) {
	return leaderCall(w.s, ctx, req, workersOf, workersAPI.Release, func(ctx context.Context) (*pb.ReleaseResponse, error) {
		if err := w.s.actAsWorker(ctx, req.Msg.GetWorkerId()); err != nil {
			return nil, err
		}
		j, err := applyAs[fsm.Job](w.s, ctx, req.Msg, releaseOf)
		if err != nil {
			return nil, err
		}
		return &pb.ReleaseResponse{Job: jobToProto(&j, w.s.node.Wall())}, nil
	})
}

func (w workerService) ListLeases(ctx context.Context, req *connect.Request[pb.ListLeasesRequest]) (*connect.Response[pb.ListLeasesResponse], error) {
	if err := rules.CheckID("worker_id", req.Msg.GetWorkerId()); err != nil {
		return nil, toWire(err)
	}
	return readCall(w.s, ctx, req, req.Msg.GetConsistency(), workersOf, workersAPI.ListLeases, func(_ context.Context, f *fsm.FSM) (*pb.ListLeasesResponse, error) {
		out := &pb.ListLeasesResponse{}
		for _, l := range f.WorkerLeases(req.Msg.GetWorkerId()) {
			j, err := f.Job(l.JobID)
			if err != nil {
				continue // ended between the two reads
			}
			out.Leases = append(out.Leases, &pb.Grant{Job: jobToProto(&j, w.s.node.Wall()), Lease: leaseToProto(l.JobID, &l.Lease)})
		}
		return out, nil
	})
}

func (w workerService) ListWorkers(ctx context.Context, req *connect.Request[pb.ListWorkersRequest]) (*connect.Response[pb.ListWorkersResponse], error) {
	return readCall(w.s, ctx, req, req.Msg.GetConsistency(), workersOf, workersAPI.ListWorkers, func(_ context.Context, f *fsm.FSM) (*pb.ListWorkersResponse, error) {
		live := f.LiveLeases()
		total := 0
		for _, refs := range live {
			total += len(refs)
		}
		return &pb.ListWorkersResponse{Workers: w.workersOf(f.Workers(), live, total <= maxListedLeases)}, nil
	})
}

func (w workerService) GetWorker(ctx context.Context, req *connect.Request[pb.GetWorkerRequest]) (*connect.Response[pb.GetWorkerResponse], error) {
	if err := rules.CheckID("worker_id", req.Msg.GetWorkerId()); err != nil {
		return nil, toWire(err)
	}
	return readCall(w.s, ctx, req, req.Msg.GetConsistency(), workersOf, workersAPI.GetWorker, func(_ context.Context, f *fsm.FSM) (*pb.GetWorkerResponse, error) {
		wk, err := f.Worker(req.Msg.GetWorkerId())
		if err != nil {
			// Not registered is not found here: nothing is being done
			// in its name.
			return nil, fmt.Errorf("%w: worker %s is not registered", fsm.ErrNotFound, req.Msg.GetWorkerId())
		}
		var refs []fsm.LeaseRef
		for _, l := range f.WorkerLeases(wk.ID) {
			refs = append(refs, fsm.LeaseRef{JobID: l.JobID, Token: l.Token})
		}
		return &pb.GetWorkerResponse{Worker: w.workersOf([]fsm.Worker{wk}, map[string][]fsm.LeaseRef{wk.ID: refs}, true)[0]}, nil
	})
}

// maxListedLeases bounds the lease refs one ListWorkers answer carries:
// past it (a cluster holding more live leases) the list has counts only,
// and GetWorker names one worker's.
var maxListedLeases = 10_000 // a variable so tests can lower it

// workersOf is the API's record of each worker: the state's (capacity,
// registration, version, live leases: the refs when withRefs) and, on the
// established leader, its expiry table's (state, silence). Anywhere else
// the state is unknown: the table is leader-local, and a stale read on a
// follower has none.
func (w workerService) workersOf(wks []fsm.Worker, live map[string][]fsm.LeaseRef, withRefs bool) []*pb.Worker {
	ids := make([]string, len(wks))
	for i := range wks {
		ids[i] = wks[i].ID
	}
	presence, err := w.s.node.Presence(ids)
	if err != nil {
		presence = make([]cluster.Presence, len(wks)) // unknown
	}
	out := make([]*pb.Worker, len(wks))
	for i := range wks {
		out[i] = workerToProto(&wks[i])
		presenceToProto(out[i], presence[i])
		out[i].LeaseCount = uint32(len(live[wks[i].ID]))
		if withRefs {
			out[i].Leases = refsToProto(live[wks[i].ID])
		}
	}
	return out
}
