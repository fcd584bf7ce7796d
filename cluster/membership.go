package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	"github.com/leasehold/leasehold/transport/rules"
)

// membershipLoop forms or joins a cluster when the node starts without data,
// then keeps this node's addresses in the replicated node table current.
// The same configuration works on first boot and on every restart: a node
// with data skips straight to keeping its addresses current.
func (n *Node) membershipLoop(fresh bool) {
	tick := time.NewTicker(n.cfg.JoinRetry)
	defer tick.Stop()
	ctx := n.life
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
		if err := n.askJoin(ctx, target, false); err != nil {
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
// add this node as a voter; with refresh, only to bring this node's
// addresses in the node table up to date if it is a voter.
func (n *Node) askJoin(ctx context.Context, addr string, refresh bool) error {
	for hop := 0; hop < 2; hop++ {
		cctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
		var reply transport.PeerJoinReply
		req := transport.PeerJoinRequest{Node: n.self(), Fresh: !n.inCluster(), Refresh: refresh}
		err := n.peers.Call(cctx, addr, transport.MethodPeerJoin, req, &reply)
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
func (n *Node) Join(ctx context.Context, addr string) error { return n.askJoin(ctx, addr, false) }

// reconcileSelf makes sure the replicated node table has this node's
// current addresses (they may change across restarts). A follower asks the
// leader with a refresh, which never asks to be added: a node removed by
// an admin while it ran (its record may be missing, or go before it hears
// of the removal) would otherwise undo the removal at its next tick. Only
// an explicit join (Join, a fresh node's join list, the API's AddNode)
// adds a node.
func (n *Node) reconcileSelf(ctx context.Context) {
	if cur, ok := n.fsm.Node(n.id); ok && cur.RaftAddr == n.advertise && cur.APIAddr == n.cfg.APIAddr {
		return
	}
	if h := n.cfg.holdRefresh; h != nil && h.Load() {
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
	n.noteRefresh(n.askJoin(ctx, string(leader), true))
}

// noteRefresh logs the outcome of a refresh: a refusal for not being a
// member once (at warn, with the leader's hint), other failures at debug.
func (n *Node) noteRefresh(err error) {
	log := n.logger.Named("membership")
	var rerr *transport.RPCError
	if errors.As(err, &rerr) && rerr.Code == transport.CodeNotMember {
		if !n.refreshRefused.Swap(true) {
			log.Warn("not_a_member", "error", err)
		}
		return
	}
	n.refreshRefused.Store(false)
	if err != nil {
		log.Debug("publish_addresses_failed", "error", err)
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
		if _, err := n.setVoterRecord(ctx, &fsm.SetNode{NodeID: a.ID, RaftAddr: a.RaftAddr, APIAddr: a.APIAddr}, false); err != nil {
			n.logger.Named("membership").Warn("set_node_failed", "node_id", a.ID, "error", err)
		}
	}
}

// peerBook remembers the addresses peers announced during bootstrap, until
// the leader has written them into the node table.
type peerBook struct {
	mu    sync.Mutex
	nodes map[string]transport.NodeAddr
}

func (n *Node) remember(a transport.NodeAddr) {
	if rules.CheckID("node_id", a.ID) != nil || rules.CheckAddr("raft_addr", a.RaftAddr) != nil ||
		rules.CheckAddr("api_addr", a.APIAddr) != nil {
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
