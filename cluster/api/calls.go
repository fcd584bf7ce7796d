package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// Every handler has one of two shapes, each written once here: a call only
// the leader can answer (a write, an acquire, a heartbeat), and a read. A
// handler gives the shape its own work as a typed function, plus the
// method of the leader's client to forward to when this node cannot
// answer. Input is validated in that function, before anything is
// proposed or forwarded: a follower never sends on what it would refuse.

// Short names for the generated clients of another node, and selectors of
// one node's clients, for leaderCall and readCall.
type (
	jobsAPI    = leaseholdv1connect.JobServiceClient
	workersAPI = leaseholdv1connect.WorkerServiceClient
	eventsAPI  = leaseholdv1connect.EventServiceClient
	clusterAPI = leaseholdv1connect.ClusterServiceClient
)

func jobsOf(p *peerClients) jobsAPI       { return p.jobs }
func workersOf(p *peerClients) workersAPI { return p.workers }
func eventsOf(p *peerClients) eventsAPI   { return p.events }
func clusterOf(p *peerClients) clusterAPI { return p.cluster }

// leaderCall answers a call only the leader can answer: do runs here, and
// when it says this node is not the leader, the request goes to the leader
// instead (svc selects the leader's client of the service, method is its
// method expression, e.g. workersAPI.Report).
func leaderCall[S, Req, Res any](s *Server, ctx context.Context, req *connect.Request[Req],
	svc func(*peerClients) S, method func(S, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	do func(ctx context.Context) (*Res, error),
) (*connect.Response[Res], error) {
	res, err := do(ctx)
	if p := s.leaderFor(ctx, err); p != nil {
		s.stats.forwards.WithLabelValues("write").Inc()
		return method(svc(p), ctx, connect.NewRequest(req.Msg))
	}
	if err != nil {
		return nil, toWire(err)
	}
	return connect.NewResponse(res), nil
}

// readCall answers a read from a state this node may read at the
// consistency asked for (the leader's after a barrier; any node's for a
// stale read), or has the leader answer it.
func readCall[S, Req, Res any](s *Server, ctx context.Context, req *connect.Request[Req], c pb.Consistency,
	svc func(*peerClients) S, method func(S, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	do func(ctx context.Context, f *fsm.FSM) (*Res, error),
) (*connect.Response[Res], error) {
	if err := checkConsistency(c); err != nil {
		return nil, toWire(err)
	}
	f, err := s.node.State(ctx, c == pb.Consistency_CONSISTENCY_STALE)
	if p := s.leaderFor(ctx, err); p != nil {
		s.stats.forwards.WithLabelValues("read").Inc()
		return method(svc(p), ctx, connect.NewRequest(req.Msg))
	}
	if err != nil {
		return nil, toWire(err)
	}
	res, err := do(ctx, f)
	if err != nil {
		return nil, toWire(err)
	}
	return connect.NewResponse(res), nil
}

// applyAs translates a write request into its command with of, validates
// the command and proposes it, and returns the state machine's answer as R,
// the type its command's handler returns.
func applyAs[R, M any, C fsm.Command](s *Server, ctx context.Context, msg M, of func(M) (C, error)) (R, error) {
	var zero R
	cmd, err := of(msg)
	if err != nil {
		return zero, err
	}
	if err := cmd.Validate(); err != nil {
		return zero, err
	}
	v, err := s.node.Apply(ctx, cmd)
	if err != nil {
		return zero, err
	}
	r, ok := v.(R)
	if !ok {
		return zero, fmt.Errorf("%T answered %T, not %T", cmd, v, zero)
	}
	return r, nil
}

// firstError returns the first of a request's field checks that failed.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
