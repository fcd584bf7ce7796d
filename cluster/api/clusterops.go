package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

type clusterService struct{ s *Server }

func (c clusterService) Status(ctx context.Context, req *connect.Request[pb.StatusRequest]) (*connect.Response[pb.StatusResponse], error) {
	st := c.s.status()
	if req.Msg.GetIncludeHash() {
		// One frozen snapshot gives the hash and the state machine index it
		// is the state of, together.
		h, idx := c.s.node.FSM().HashAt()
		st.StateHash, st.StateIndex = h[:], idx
	}
	return connect.NewResponse(st), nil
}

func (s *Server) status() *pb.StatusResponse {
	st := s.node.Status()
	stats := s.node.FSM().Stats()
	out := &pb.StatusResponse{
		Id: st.ID, RaftAddr: st.RaftAddr, ApiAddr: st.APIAddr, State: st.State, Term: st.Term,
		LeaderId: st.LeaderID, LeaderApi: st.LeaderAPI, CommitIndex: st.CommitIndex,
		AppliedIndex: st.AppliedIndex, LastIndex: st.LastIndex, Ready: st.Ready,
		WorkersTimed: uint32(st.WorkersTimed), LastToken: stats.LastToken, Workers: uint32(stats.Workers),
		LiveLeases: uint32(stats.LiveLeases), LastEventSeq: stats.LastEventSeq,
		Timings:  timingsToProto(s.node.Timings()),
		Insecure: s.insecure, PeerTls: st.PeerTLS, ApiAuth: s.creds.Load().Enabled(),
		StateBytes: stats.Bytes, StateQuotaBytes: s.node.StateQuota(),
	}
	for state, n := range stats.Jobs {
		out.Jobs = append(out.Jobs, &pb.JobCount{State: stateToProto(state), Count: uint64(n)})
	}
	sortJobCounts(out.Jobs)
	now := s.node.Wall()
	queues, more := s.node.FSM().Queues("", statusQueues, now.UnixNano())
	for i := range queues {
		out.Queues = append(out.Queues, s.queueToProto(&queues[i], now, false))
	}
	out.QueuesTruncated = more
	return out
}

func sortJobCounts(c []*pb.JobCount) {
	sort.Slice(c, func(i, j int) bool { return c[i].State < c[j].State })
}

func (c clusterService) Members(ctx context.Context, req *connect.Request[pb.MembersRequest]) (*connect.Response[pb.MembersResponse], error) {
	members, err := c.s.node.Members()
	if err != nil {
		return nil, toWire(err)
	}
	out := &pb.MembersResponse{}
	for _, m := range members {
		out.Members = append(out.Members, &pb.Member{Id: m.ID, RaftAddr: m.RaftAddr, ApiAddr: m.APIAddr, Voter: m.Voter, Leader: m.Leader,
			Level: uint32(m.Level), Version: m.Version})
	}
	return connect.NewResponse(out), nil
}

func (c clusterService) AddNode(ctx context.Context, req *connect.Request[pb.AddNodeRequest]) (*connect.Response[pb.AddNodeResponse], error) {
	return leaderCall(c.s, ctx, req, clusterOf, clusterAPI.AddNode, func(ctx context.Context) (*pb.AddNodeResponse, error) {
		m := req.Msg
		if err := firstError(rules.CheckID("id", m.GetId()), rules.CheckAddr("raft_addr", m.GetRaftAddr()),
			rules.CheckAddr("api_addr", m.GetApiAddr())); err != nil {
			return nil, err
		}
		a := transport.NodeAddr{ID: m.GetId(), RaftAddr: m.GetRaftAddr(), APIAddr: m.GetApiAddr()}
		return &pb.AddNodeResponse{}, c.s.node.AddNode(ctx, a, identityOf(ctx).actor())
	})
}

func (c clusterService) RemoveNode(ctx context.Context, req *connect.Request[pb.RemoveNodeRequest]) (*connect.Response[pb.RemoveNodeResponse], error) {
	return leaderCall(c.s, ctx, req, clusterOf, clusterAPI.RemoveNode, func(ctx context.Context) (*pb.RemoveNodeResponse, error) {
		if err := rules.CheckID("id", req.Msg.GetId()); err != nil {
			return nil, err
		}
		return &pb.RemoveNodeResponse{}, c.s.node.RemoveNode(ctx, req.Msg.GetId(), identityOf(ctx).actor())
	})
}

func (c clusterService) TransferLeadership(ctx context.Context, req *connect.Request[pb.TransferLeadershipRequest]) (*connect.Response[pb.TransferLeadershipResponse], error) {
	return leaderCall(c.s, ctx, req, clusterOf, clusterAPI.TransferLeadership, func(ctx context.Context) (*pb.TransferLeadershipResponse, error) {
		if err := rules.CheckOptionalID("id", req.Msg.GetId()); err != nil {
			return nil, err
		}
		if err := c.s.node.TransferLeadership(ctx, req.Msg.GetId(), identityOf(ctx).actor()); err != nil {
			return nil, err
		}
		return &pb.TransferLeadershipResponse{LeaderId: c.s.node.NewLeader(ctx, req.Msg.GetId())}, nil
	})
}

// --- plain HTTP: snapshots and health ---

// saveSnapshot streams a backup of the state, read linearizably on the
// leader; a follower proxies the request there.
func (s *Server) saveSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := s.node.ReadBarrier(r.Context()); err != nil {
		s.proxyOrFail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	// The stream ends with a checksum: a transfer cut short is refused by
	// whoever reads it (snapshot inspect, restore).
	snap := s.node.FSM().Snapshot()
	defer snap.Release()
	n, err := snap.WriteTo(w)
	if err != nil {
		s.log.Warn("snapshot_save_failed", "error", err)
	}
	s.node.AuditAsync(auditRecord(identityOf(r.Context()), "snapshot.save",
		fmt.Sprintf("index %d, %d bytes: %s", snap.LastIndex(), n, outcome(err))))
}

// restoreSnapshot makes the request body the cluster's state (on the
// leader; a follower proxies).
func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	stats, err := s.node.RestoreSnapshot(r.Context(), http.MaxBytesReader(w, r.Body, MaxSnapshotBytes))
	if s.leaderFor(r.Context(), err) == nil && !errors.Is(err, cluster.ErrNotLeader) && !errors.Is(err, cluster.ErrNoLeader) {
		detail := fmt.Sprintf("last token %d: done", stats.LastToken)
		if err != nil {
			detail = outcome(err)
		}
		s.node.AuditAsync(auditRecord(identityOf(r.Context()), "snapshot.restore", detail))
	}
	if err != nil {
		s.proxyOrFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"last_index": stats.LastIndex, "last_token": stats.LastToken, "workers": stats.Workers})
}

func (s *Server) proxyOrFail(w http.ResponseWriter, r *http.Request, err error) {
	if p := s.leaderFor(r.Context(), err); p != nil {
		target, _ := url.Parse(p.base)
		proxy := httputil.NewSingleHostReverseProxy(target)
		proxy.Transport = s.client.Transport
		proxy.ServeHTTP(w, r)
		return
	}
	writeError(w, toWire(err))
}

func (s *Server) livez(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is 200 once the node is ready: the leader after taking office, a
// follower once it knows the leader, either with room on its disk. A 503
// says why in "reason".
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	st := s.node.Status()
	body := map[string]any{"ready": st.Ready, "state": st.State, "leader_id": st.LeaderID, "leader_api": st.LeaderAPI,
		"insecure": s.insecure}
	code := http.StatusOK
	if !st.Ready {
		code, body["reason"] = http.StatusServiceUnavailable, st.NotReady
	}
	writeJSON(w, code, body)
}

// outcome is an audit record's result.
func outcome(err error) string {
	if err == nil {
		return "done"
	}
	return "failed: " + err.Error()
}

// metrics serves the node's counters in the Prometheus text format.
// httpStatus maps Connect codes to HTTP for the plain endpoints.
var httpStatus = map[connect.Code]int{
	connect.CodeUnavailable:        http.StatusServiceUnavailable,
	connect.CodeAborted:            http.StatusConflict,
	connect.CodeDeadlineExceeded:   http.StatusGatewayTimeout,
	connect.CodeInvalidArgument:    http.StatusBadRequest,
	connect.CodeResourceExhausted:  http.StatusRequestEntityTooLarge,
	connect.CodeNotFound:           http.StatusNotFound,
	connect.CodeAlreadyExists:      http.StatusConflict,
	connect.CodeFailedPrecondition: http.StatusPreconditionFailed,
	connect.CodePermissionDenied:   http.StatusForbidden,
	connect.CodeUnauthenticated:    http.StatusUnauthorized,
	connect.CodeCanceled:           499,
}

func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		if s, ok := httpStatus[cerr.Code()]; ok {
			status = s
		}
	}
	body := map[string]string{"message": err.Error()}
	if d := transport.DetailOf(err); d != nil {
		body["reason"], body["field"], body["leader_api"] = d.GetReason(), d.GetField(), d.GetLeaderApi()
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
