package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
)

// The node-to-node RPC. Who may ask what is decided here, from the peer the
// transport authenticated (transport.PeerFromContext): with peer TLS a
// connection speaks only for the node id its certificate names.

func (n *Node) registerRPC() {
	n.rpc.Handle(transport.MethodPeerInfo, n.handlePeerInfo)
	n.rpc.Handle(transport.MethodPeerJoin, n.handlePeerJoin)
	n.rpc.Handle(transport.MethodPeerAudit, n.handlePeerAudit)
}

func (n *Node) handlePeerInfo(ctx context.Context, body json.RawMessage) (any, error) {
	var req transport.PeerInfoRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, &rpcError{code: transport.CodeForbidden, err: fmt.Errorf("bad request: %w", err)}
	}
	// What a caller says about itself is kept for bootstrap only when the
	// caller proved it is that node.
	if peer, _ := transport.PeerFromContext(ctx); req.From.ID != "" && peer.NodeID() == req.From.ID {
		n.remember(req.From)
	}
	leader, leaderID := n.raft.LeaderWithID()
	v := n.leaderView()
	return transport.PeerInfo{
		Node: n.self(), InCluster: n.inCluster(), BootstrapExpect: n.cfg.BootstrapExpect, Members: n.memberSet(),
		LeaderID: string(leaderID), LeaderRaftAddr: string(leader), Level: int(n.level()), Version: n.cfg.Version,
		LeaderSilentMs: v.silentFor.Milliseconds(), Term: v.term, Follower: v.follower, LastLogTerm: v.lastTerm, LastLogIndex: v.lastIndex,
		Standing: v.standing,
	}, nil
}

// handlePeerJoin adds the calling node, or with req.Refresh only refreshes
// the record of a voter (a non-voter is refused CodeNotMember). With peer
// TLS the caller must be the node it asks to add; in every mode the node
// at the claimed Raft address must confirm the claim (AddNode).
func (n *Node) handlePeerJoin(ctx context.Context, body json.RawMessage) (any, error) {
	peer, _ := transport.PeerFromContext(ctx)
	var req transport.PeerJoinRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, &rpcError{code: transport.CodeForbidden, err: fmt.Errorf("bad request: %w", err)}
	}
	by := Actor{Name: peer.String(), Source: peer.Addr}
	if n.mux.PeerTLS() && peer.NodeID() != req.Node.ID {
		err := fmt.Errorf("%w: %s may not ask for changes to node %s", ErrForbidden, peer, req.Node.ID)
		n.auditRefusal(by, "cluster.join", "refused: "+err.Error())
		return nil, peerError(err)
	}
	if !n.mux.PeerTLS() {
		// Without peer TLS nobody can prove to be a member: a member that
		// is down or cut off cannot deny a stranger answering as it at
		// another address. Moving a member is then an admin's act.
		for _, s := range n.voters() {
			if string(s.ID) == req.Node.ID && string(s.Address) != req.Node.RaftAddr {
				err := fmt.Errorf("%w: without peer TLS, member %s's Raft address (%s) changes only through an admin (leasehold cluster join %s %s %s)",
					ErrForbidden, req.Node.ID, s.Address, req.Node.ID, req.Node.RaftAddr, req.Node.APIAddr)
				n.auditRefusal(by, "cluster.join", "refused: "+err.Error())
				return nil, peerError(err)
			}
		}
	}
	if req.Fresh && n.isVoter(req.Node.ID) {
		return nil, &rpcError{code: transport.CodeRejoinRefused, err: fmt.Errorf(
			"node %s is a voter but lost its data (and its vote): remove it first (leasehold cluster remove %s)", req.Node.ID, req.Node.ID)}
	}
	if err := n.addNode(ctx, req.Node, by, req.Refresh); err != nil {
		return nil, peerError(err)
	}
	return transport.PeerJoinReply{LeaderID: n.id}, nil
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
func (e *rpcError) Unwrap() error                 { return e.err }

func peerError(err error) error {
	var nl *NotLeaderError
	switch {
	case errors.As(err, &nl):
		if nl.LeaderID == "" {
			return &rpcError{code: transport.CodeNoLeader, err: err}
		}
		return &rpcError{code: transport.CodeNotLeader, err: err,
			details: map[string]string{"leader_id": nl.LeaderID, "leader_raft_addr": nl.LeaderRaft}}
	case errors.Is(err, ErrNotReady):
		return &rpcError{code: transport.CodeNotReady, err: err}
	case errors.Is(err, ErrForbidden):
		return &rpcError{code: transport.CodeForbidden, err: err}
	case errors.Is(err, ErrIDInUse):
		return &rpcError{code: transport.CodeIDInUse, err: err}
	case errors.Is(err, ErrClaimRefused):
		return &rpcError{code: transport.CodeClaimRefused, err: err}
	case errors.Is(err, ErrNotMember):
		return &rpcError{code: transport.CodeNotMember, err: err}
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

// Actor is who asked for an admin action and from where, for its audit
// record: a token's name or a certificate's identity, or a node.
type Actor struct {
	Name   string
	Source string
}

// auditAsync queues the audit record of an action by.
func (n *Node) auditAsync(by Actor, action, detail string) {
	n.AuditAsync(AuditOf(by, action, detail))
}

// AuditOf is the audit record of action by, its fields clipped to fit.
func AuditOf(by Actor, action, detail string) fsm.Audit {
	return fsm.Audit{Action: action, Actor: clip(by.Name, fsm.MaxActorLen), Source: clip(by.Source, fsm.MaxAddrLen),
		Detail: clip(detail, fsm.MaxMessageLen)}
}

// clip shortens s to at most max bytes without splitting a character.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && s[max]&0xC0 == 0x80 {
		max--
	}
	return s[:max]
}
