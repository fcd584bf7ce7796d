package api

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
	"github.com/leasehold/leasehold/transport/rules"
)

// queueService lists queues and changes their settings; no role but admin
// may call it (roleAccess does not list it).
type queueService struct{ s *Server }

var _ leaseholdv1connect.QueueServiceHandler = queueService{}

type queuesAPI = leaseholdv1connect.QueueServiceClient

func queuesOf(p *peerClients) queuesAPI { return p.queues }

func (q queueService) ListQueues(ctx context.Context, req *connect.Request[pb.ListQueuesRequest]) (*connect.Response[pb.ListQueuesResponse], error) {
	m := req.Msg
	if err := optional(rules.CheckName, "page_token", m.GetPageToken()); err != nil {
		return nil, toWire(err)
	}
	return readCall(q.s, ctx, req, m.GetConsistency(), queuesOf, queuesAPI.ListQueues, func(_ context.Context, f *fsm.FSM) (*pb.ListQueuesResponse, error) {
		now := q.s.node.Wall()
		list, more := f.Queues(m.GetPageToken(), int(m.GetPageSize()), now.UnixNano())
		res := &pb.ListQueuesResponse{}
		for i := range list {
			res.Queues = append(res.Queues, q.s.queueToProto(&list[i], now, true))
		}
		if more && len(list) > 0 {
			res.NextPageToken = list[len(list)-1].Name
		}
		return res, nil
	})
}

func (q queueService) PauseQueue(ctx context.Context, req *connect.Request[pb.PauseQueueRequest]) (*connect.Response[pb.PauseQueueResponse], error) {
	return changeQueue(q.s, ctx, req, queuesAPI.PauseQueue, pauseOf, "queue.pause",
		func(s *pb.QueueSettings) *pb.PauseQueueResponse { return &pb.PauseQueueResponse{Settings: s} })
}

func (q queueService) ResumeQueue(ctx context.Context, req *connect.Request[pb.ResumeQueueRequest]) (*connect.Response[pb.ResumeQueueResponse], error) {
	return changeQueue(q.s, ctx, req, queuesAPI.ResumeQueue, resumeOf, "queue.resume",
		func(s *pb.QueueSettings) *pb.ResumeQueueResponse { return &pb.ResumeQueueResponse{Settings: s} })
}

func (q queueService) SetQueueLimit(ctx context.Context, req *connect.Request[pb.SetQueueLimitRequest]) (*connect.Response[pb.SetQueueLimitResponse], error) {
	return changeQueue(q.s, ctx, req, queuesAPI.SetQueueLimit, queueLimitOf, "queue.limit",
		func(s *pb.QueueSettings) *pb.SetQueueLimitResponse { return &pb.SetQueueLimitResponse{Settings: s} })
}

// changeQueue proposes a change of a queue's settings on the leader, audits
// who made it, and answers the settings after it.
func changeQueue[M, R any](s *Server, ctx context.Context, req *connect.Request[M],
	method func(queuesAPI, context.Context, *connect.Request[M]) (*connect.Response[R], error),
	of func(*M) (*fsm.SetQueue, error), action string, answer func(*pb.QueueSettings) *R,
) (*connect.Response[R], error) {
	return leaderCall(s, ctx, req, queuesOf, method, func(ctx context.Context) (*R, error) {
		r, err := applyAs[fsm.QueueSettings](s, ctx, req.Msg, of)
		if err != nil {
			return nil, err
		}
		s.node.AuditAsync(auditRecord(identityOf(ctx), action,
			fmt.Sprintf("queue %s: paused %t, max running %d", r.Queue, r.Paused, r.MaxRunning)))
		return answer(queueSettingsToProto(r)), nil
	})
}

func queueSettingsToProto(qs fsm.QueueSettings) *pb.QueueSettings {
	return &pb.QueueSettings{Name: qs.Queue, Paused: qs.Paused, MaxRunning: qs.MaxRunning}
}

// queueToProto converts one listed queue; the oldest ready job's age and
// the grant rate are read against this node's clocks, and only with full.
func (s *Server) queueToProto(qi *fsm.QueueInfo, now time.Time, full bool) *pb.Queue {
	out := &pb.Queue{
		Name: qi.Name, Ready: uint64(qi.Ready), Scheduled: uint64(qi.Scheduled), Running: uint64(qi.Running),
		Paused: qi.Paused, MaxRunning: qi.MaxRunning,
	}
	for st, n := range qi.Jobs {
		out.Jobs = append(out.Jobs, &pb.JobCount{State: stateToProto(st), Count: uint64(n)})
	}
	sortJobCounts(out.Jobs)
	out.Dead = uint64(qi.Jobs[fsm.JobDead])
	if full && qi.OldestReady != 0 {
		since := time.Unix(0, qi.OldestReady)
		out.OldestReadySince = timestamppb.New(since)
		out.OldestReadyAge = durationpb.New(max(now.Sub(since), 0))
	}
	if full {
		out.GrantRate = s.node.GrantRate(qi.Name)
	}
	return out
}

// statusQueues bounds the queues cluster status shows.
const statusQueues = 100
