package api

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

type eventService struct{ s *Server }

func eventsToProto(evs []fsm.Event) []*pb.Event {
	out := make([]*pb.Event, len(evs))
	for i := range evs {
		out[i] = eventToProto(&evs[i])
	}
	return out
}

// ListEvents reads once (linearizably unless stale is asked for) and, if
// the caller is caught up and asked to wait, waits on this node's state for
// the next event. Waiting locally after a linearizable read keeps the
// answer at least as fresh as the read.
func (e eventService) ListEvents(ctx context.Context, req *connect.Request[pb.ListEventsRequest]) (*connect.Response[pb.ListEventsResponse], error) {
	m := req.Msg
	d, err := waitOf(m.GetWait())
	if err != nil {
		return nil, toWire(err)
	}
	return readCall(e.s, ctx, req, m.GetConsistency(), eventsOf, eventsAPI.ListEvents, func(ctx context.Context, f *fsm.FSM) (*pb.ListEventsResponse, error) {
		wait := time.NewTimer(d)
		defer wait.Stop()
		for {
			changed := f.Changed()
			page := f.Events(m.GetAfterSeq(), int(m.GetLimit()))
			if len(page.Events) > 0 || page.Truncated || m.GetWait() == nil {
				return &pb.ListEventsResponse{Events: eventsToProto(page.Events), LastSeq: page.LastSeq, Truncated: page.Truncated}, nil
			}
			select {
			case <-changed:
			case <-wait.C:
				return &pb.ListEventsResponse{LastSeq: page.LastSeq}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	})
}

// WatchEvents streams this node's events from after_seq on, as they are
// applied here. Any node serves it; a follower's stream runs a little
// behind the leader's, in the same order.
func (e eventService) WatchEvents(ctx context.Context, req *connect.Request[pb.WatchEventsRequest], stream *connect.ServerStream[pb.WatchEventsResponse]) error {
	f := e.s.node.FSM()
	after := req.Msg.GetAfterSeq()
	for {
		changed := f.Changed()
		page := f.Events(after, fsm.MaxPageSize)
		if len(page.Events) > 0 || page.Truncated {
			if err := stream.Send(&pb.WatchEventsResponse{Events: eventsToProto(page.Events), Truncated: page.Truncated}); err != nil {
				return err
			}
			if n := len(page.Events); n > 0 {
				after = page.Events[n-1].Seq
			} else {
				after = page.LastSeq
			}
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}
