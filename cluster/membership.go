package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
)

// membershipLoop forms or joins a cluster when the node starts without data,
// then keeps this node's addresses in the replicated node table current.
// The same configuration works on first boot and on every restart: a node
// with data skips straight to keeping its addresses current.
func (n *Node) membershipLoop(fresh bool) {
	tick := time.NewTicker(n.cfg.JoinRetry)
	defer tick.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.shutdownCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		if fresh && !n.inCluster() {
			n.bootstrapOrJoin(ctx)
		} else {
			n.reconcileSelf(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (n *Node) inCluster() bool {
	f := n.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

func (n *Node) self() transport.NodeAddr {
	return transport.NodeAddr{ID: n.id, RaftAddr: n.advertise, APIAddr: n.cfg.APIAddr}
}

// bootstrapOrJoin is one attempt of a node without data. If any peer is
// in a cluster, it asks that cluster's leader to add this node, and never
// bootstraps: a cluster exists, even if it has no leader this moment.
// Otherwise, once every node of its member set (its join list and itself,
// exactly BootstrapExpect addresses) answers naming the same set and the
// same expectation, it forms the cluster. Every such node computes the same
// configuration, and Raft accepts the same bootstrap on every member.
func (n *Node) bootstrapOrJoin(ctx context.Context) {
	log := n.logger.Named("bootstrap")
	var infos []transport.PeerInfo
	inCluster := false
	for _, addr := range n.cfg.Join {
		if addr == n.advertise {
			continue
		}
		var info transport.PeerInfo
		cctx, cancel := context.WithTimeout(ctx, n.cfg.JoinRetry)
		err := n.peers.Call(cctx, addr, transport.MethodPeerInfo, transport.PeerInfoRequest{From: n.self()}, &info)
		cancel()
		if err != nil {
			log.Debug("peer_unreachable", "peer", addr, "error", err)
			continue
		}
		if info.Node.ID == n.id {
			continue // our own address under another name
		}
		infos = append(infos, info)
		n.remember(info.Node)
		if !info.InCluster {
			continue
		}
		inCluster = true
		target := info.LeaderRaftAddr
		if target == "" {
			target = info.Node.RaftAddr
		}
		if err := n.askJoin(ctx, target); err != nil {
			log.Debug("join_failed", "peer", target, "error", err)
			continue
		}
		log.Info("joined_cluster", "via", target)
		return
	}
	want := n.cfg.BootstrapExpect
	if inCluster || want == 0 {
		return
	}
	members := n.memberSet()
	if len(members) != want {
		log.Warn("bootstrap_refused", "reason", "the join list and this node do not name exactly bootstrap_expect nodes",
			"members", members, "expect", want)
		return
	}
	if len(infos)+1 < want {
		return // not everyone is up yet
	}
	servers := []raft.Server{{ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.advertise), Suffrage: raft.Voter}}
	for _, info := range infos {
		if info.BootstrapExpect != want || !slices.Equal(info.Members, members) {
			log.Warn("bootstrap_disagreement", "peer", info.Node.ID, "peer_expect", info.BootstrapExpect,
				"peer_members", info.Members, "expect", want, "members", members)
			return
		}
		servers = append(servers, raft.Server{ID: raft.ServerID(info.Node.ID), Address: raft.ServerAddress(info.Node.RaftAddr), Suffrage: raft.Voter})
	}
	slices.SortFunc(servers, func(a, b raft.Server) int { return cmp.Compare(a.ID, b.ID) })
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	switch {
	case err == nil:
		log.Info("cluster_bootstrapped", "voters", len(servers))
	case errors.Is(err, raft.ErrCantBootstrap):
	default:
		log.Warn("bootstrap_failed", "error", err)
	}
}

// memberSet is the sorted set of Raft addresses this node would bootstrap
// with: its join list and itself.
func (n *Node) memberSet() []string {
	set := append([]string{n.advertise}, n.cfg.Join...)
	slices.Sort(set)
	return slices.Compact(set)
}

// askJoin asks the node at addr (the leader, or a node that names it) to
// add this node as a voter.
func (n *Node) askJoin(ctx context.Context, addr string) error {
	for hop := 0; hop < 2; hop++ {
		cctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
		var reply transport.PeerJoinReply
		err := n.peers.Call(cctx, addr, transport.MethodPeerJoin, transport.PeerJoinRequest{Node: n.self(), Fresh: !n.inCluster()}, &reply)
		cancel()
		var rerr *transport.RPCError
		if errors.As(err, &rerr) && rerr.Code == transport.CodeNotLeader && rerr.Details["leader_raft_addr"] != "" {
			addr = rerr.Details["leader_raft_addr"]
			continue
		}
		return err
	}
	return fmt.Errorf("%w: no leader found to join", ErrNoLeader)
}

// Join asks the cluster a peer at addr belongs to to add this node.
func (n *Node) Join(ctx context.Context, addr string) error { return n.askJoin(ctx, addr) }

// reconcileSelf makes sure the replicated node table has this node's
// current addresses (they may change across restarts).
func (n *Node) reconcileSelf(ctx context.Context) {
	if cur, ok := n.fsm.Node(n.id); ok && cur.RaftAddr == n.advertise && cur.APIAddr == n.cfg.APIAddr {
		return
	}
	if _, err := n.established(); err == nil {
		n.publishSelf(ctx)
		return
	}
	leader, _ := n.raft.LeaderWithID()
	if leader == "" {
		return
	}
	if err := n.askJoin(ctx, string(leader)); err != nil {
		n.logger.Named("membership").Debug("publish_addresses_failed", "error", err)
	}
}

// publishSelf, on the leader, writes this node's addresses and those of
// voters it learned during bootstrap into the node table.
func (n *Node) publishSelf(ctx context.Context) {
	known := n.discovered()
	known[n.id] = n.self()
	for _, s := range n.voters() {
		a, ok := known[string(s.ID)]
		if !ok {
			continue
		}
		if cur, have := n.fsm.Node(a.ID); have && cur.RaftAddr == a.RaftAddr && cur.APIAddr == a.APIAddr {
			continue
		}
		if _, err := n.raftApply(ctx, &fsm.SetNode{NodeID: a.ID, RaftAddr: a.RaftAddr, APIAddr: a.APIAddr}); err != nil {
			n.logger.Named("membership").Warn("set_node_failed", "node_id", a.ID, "error", err)
		}
	}
}

// --- peer RPC handlers ---

// peerBook remembers the addresses peers announced during bootstrap, until
// the leader has written them into the node table.
type peerBook struct {
	mu    sync.Mutex
	nodes map[string]transport.NodeAddr
}

func (n *Node) remember(a transport.NodeAddr) {
	if (&fsm.SetNode{NodeID: a.ID, RaftAddr: a.RaftAddr, APIAddr: a.APIAddr}).Validate() != nil {
		return
	}
	n.book.mu.Lock()
	defer n.book.mu.Unlock()
	if n.book.nodes == nil {
		n.book.nodes = map[string]transport.NodeAddr{}
	}
	if len(n.book.nodes) < fsm.MaxNodes {
		n.book.nodes[a.ID] = a
	}
}

func (n *Node) discovered() map[string]transport.NodeAddr {
	n.book.mu.Lock()
	defer n.book.mu.Unlock()
	out := make(map[string]transport.NodeAddr, len(n.book.nodes)+1)
	for k, v := range n.book.nodes {
		out[k] = v
	}
	return out
}

func (n *Node) registerRPC() {
	n.rpc.Handle(transport.MethodPeerInfo, func(ctx context.Context, body json.RawMessage) (any, error) {
		var req transport.PeerInfoRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		if req.From.ID != "" {
			n.remember(req.From)
		}
		leader, leaderID := n.raft.LeaderWithID()
		return transport.PeerInfo{
			Node: n.self(), InCluster: n.inCluster(), BootstrapExpect: n.cfg.BootstrapExpect, Members: n.memberSet(),
			LeaderID: string(leaderID), LeaderRaftAddr: string(leader),
		}, nil
	})
	n.rpc.Handle(transport.MethodPeerJoin, func(ctx context.Context, body json.RawMessage) (any, error) {
		var req transport.PeerJoinRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		if req.Fresh && n.isVoter(req.Node.ID) {
			return nil, &rpcError{code: transport.CodeRejoinRefused, err: fmt.Errorf(
				"node %s is a voter but lost its data (and its vote): remove it first (leasehold cluster remove %s)", req.Node.ID, req.Node.ID)}
		}
		if err := n.AddNode(ctx, req.Node); err != nil {
			return nil, peerError(err)
		}
		return transport.PeerJoinReply{LeaderID: n.id}, nil
	})
}

// rpcError carries a cluster error over the peer RPC.
type rpcError struct {
	code    string
	details map[string]string
	err     error
}

func (e *rpcError) Error() string                 { return e.err.Error() }
func (e *rpcError) RPCCode() string               { return e.code }
func (e *rpcError) RPCDetails() map[string]string { return e.details }

func peerError(err error) error {
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		if nl.LeaderID == "" {
			return &rpcError{code: transport.CodeNoLeader, err: err}
		}
		return &rpcError{code: transport.CodeNotLeader, err: err,
			details: map[string]string{"leader_id": nl.LeaderID, "leader_raft_addr": nl.LeaderRaft}}
	}
	return err
}

func (n *Node) isVoter(id string) bool {
	for _, s := range n.voters() {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// --- operator actions ---

// AddNode adds a node as a voter and records its addresses; on the leader
// only. Asking again is harmless; a different node that took a member's
// address replaces it.
func (n *Node) AddNode(ctx context.Context, a transport.NodeAddr) error {
	if err := (&fsm.SetNode{NodeID: a.ID, RaftAddr: a.RaftAddr, APIAddr: a.APIAddr}).Validate(); err != nil {
		return err
	}
	if _, err := n.established(); err != nil {
		return err
	}
	timeout := n.cfg.ApplyTimeout
	member := false
	for _, s := range n.voters() {
		switch {
		case string(s.ID) == a.ID && string(s.Address) == a.RaftAddr:
			member = true
		case string(s.ID) != a.ID && string(s.Address) == a.RaftAddr:
			if err := n.raft.RemoveServer(s.ID, 0, timeout).Error(); err != nil {
				return n.raftError(err)
			}
		}
	}
	if !member {
		if err := n.raft.AddVoter(raft.ServerID(a.ID), raft.ServerAddress(a.RaftAddr), 0, timeout).Error(); err != nil {
			return n.raftError(err)
		}
		n.logger.Named("membership").Info("voter_added", "node_id", a.ID, "raft_addr", a.RaftAddr)
	}
	_, err := n.raftApply(ctx, &fsm.SetNode{NodeID: a.ID, RaftAddr: a.RaftAddr, APIAddr: a.APIAddr})
	return err
}

// RemoveNode removes a voter and forgets its addresses; on the leader only.
func (n *Node) RemoveNode(ctx context.Context, id string) error {
	if err := (&fsm.RemoveNode{NodeID: id}).Validate(); err != nil {
		return err
	}
	if _, err := n.established(); err != nil {
		return err
	}
	if id == n.id {
		// Raft would stop this node the moment the removal commits, with
		// the node table still naming it and nobody leading. Hand over
		// first; the new leader removes it.
		return fmt.Errorf("%w: %s leads the cluster: transfer leadership first (leasehold cluster transfer-leader)", fsm.ErrInvalidArgument, id)
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return n.raftError(err)
	}
	n.logger.Named("membership").Info("voter_removed", "node_id", id)
	_, err := n.raftApply(ctx, &fsm.RemoveNode{NodeID: id})
	return err
}

// TransferLeadership hands leadership to the voter id, or to the most
// up-to-date voter when id is empty; on the leader only.
func (n *Node) TransferLeadership(ctx context.Context, id string) error {
	if _, err := n.established(); err != nil {
		return err
	}
	if id == n.id {
		return nil // already leads
	}
	var f raft.Future
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		var addr raft.ServerAddress
		for _, s := range n.voters() {
			if string(s.ID) == id {
				addr = s.Address
			}
		}
		if addr == "" {
			return fmt.Errorf("%w: no voter %s", fsm.ErrNotFound, id)
		}
		f = n.raft.LeadershipTransferToServer(raft.ServerID(id), addr)
	}
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return n.raftError(err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	}
}

// Member is one voter as the operator sees it.
type Member struct {
	ID       string
	RaftAddr string
	APIAddr  string // empty until the node table knows it
	Voter    bool
	Leader   bool
}

// Members lists the Raft configuration with each member's API address.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, n.raftError(err)
	}
	_, leader := n.raft.LeaderWithID()
	var out []Member
	for _, s := range f.Configuration().Servers {
		m := Member{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter, Leader: s.ID == leader}
		if node, ok := n.fsm.Node(m.ID); ok {
			m.APIAddr = node.APIAddr
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Status is one node's view of the cluster.
type Status struct {
	ID           string
	RaftAddr     string
	APIAddr      string
	State        string // leader, follower, candidate, shutdown
	Term         uint64
	LeaderID     string
	LeaderAPI    string
	CommitIndex  uint64
	AppliedIndex uint64
	LastIndex    uint64
	// Ready: a leader that has taken office, or a follower that knows a
	// leader. A node that is not ready should not be sent traffic.
	Ready bool
	// WorkersTimed is the expiry table's size, on the leader.
	WorkersTimed int
}

// Status reports this node's view.
func (n *Node) Status() Status {
	_, leaderID := n.raft.LeaderWithID()
	st := Status{
		ID: n.id, RaftAddr: n.advertise, APIAddr: n.cfg.APIAddr, State: n.raft.State().String(),
		Term: n.raft.CurrentTerm(), LeaderID: string(leaderID), CommitIndex: n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(), LastIndex: n.raft.LastIndex(),
	}
	if node, ok := n.fsm.Node(st.LeaderID); ok {
		st.LeaderAPI = node.APIAddr
	}
	if ls, err := n.established(); err == nil {
		st.Ready, st.WorkersTimed = true, ls.table.Load().size()
	} else if n.raft.State() == raft.Follower && st.LeaderID != "" {
		st.Ready = true
	}
	return st
}

// Leader returns the leader's id and API address as this node knows them
// (empty when there is no leader or its address is not yet in the table).
func (n *Node) Leader() (id, api string) {
	_, lid := n.raft.LeaderWithID()
	id = string(lid)
	if node, ok := n.fsm.Node(id); ok {
		api = node.APIAddr
	}
	return id, api
}

// Timings returns the executor timings this node runs with.
func (n *Node) Timings() (renew, grace, toleration time.Duration) {
	return n.cfg.Renew, n.cfg.Grace, n.cfg.Toleration
}
