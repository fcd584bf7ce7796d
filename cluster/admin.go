package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
)

// AddNode adds a node as a voter and records its addresses; on the leader
// only. by is who asked (the node itself over the peer port, or an admin
// through the API); the outcome is audited.
//
// A claim is checked before anything changes: the node at a.RaftAddr must
// answer as a.ID with exactly these addresses (with peer TLS its
// certificate must name a.ID too), so nobody can point the node table, and
// with it followers' forwarding and clients' leader hints, at an address
// of their choosing. Another node still answering as a.ID at its old
// address keeps the id (ErrIDInUse). A member whose Raft address the new
// node now answers on is gone from there, and is replaced. Asking again
// for what is already recorded changes nothing.
func (n *Node) AddNode(ctx context.Context, a transport.NodeAddr, by Actor) error {
	return n.addNode(ctx, a, by, false)
}

// addNode is AddNode; with refresh, it only refreshes the record of a node
// that is a voter, and refuses any other with ErrNotMember.
func (n *Node) addNode(ctx context.Context, a transport.NodeAddr, by Actor, refresh bool) (err error) {
	if err := (&fsm.SetNode{NodeID: a.ID, RaftAddr: a.RaftAddr, APIAddr: a.APIAddr}).Validate(); err != nil {
		return err
	}
	if _, err := n.established(); err != nil {
		return err
	}
	if cur, ok := n.fsm.Node(a.ID); ok && n.isVoterAt(a.ID, a.RaftAddr) &&
		cur.RaftAddr == a.RaftAddr && cur.APIAddr == a.APIAddr {
		return nil
	}
	target := fmt.Sprintf("%s raft=%s api=%s", a.ID, a.RaftAddr, a.APIAddr)
	defer func() {
		if err == nil {
			n.auditAsync(by, "cluster.join", target+": added")
		} else if !errors.Is(err, ErrNotReady) && !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNoLeader) &&
			!errors.Is(err, ErrNotMember) { // a removed node's refresh, every tick: not an event
			n.auditRefusal(by, "cluster.join", target+": refused: "+err.Error())
		}
	}()
	if refresh && !n.isVoter(a.ID) {
		return notMember(a) // checked again below, after the claim's round trip
	}
	joiner, err := n.confirmClaim(ctx, a)
	if err != nil {
		return err
	}
	if n.cfg.afterClaim != nil {
		n.cfg.afterClaim(a.ID)
	}
	timeout := n.cfg.ApplyTimeout
	member := false
	var replaced []raft.ServerID
	for _, s := range n.voters() {
		switch {
		case string(s.ID) == a.ID && string(s.Address) == a.RaftAddr:
			member = true
		case string(s.ID) == a.ID && n.answersAs(ctx, string(s.Address), a.ID):
			return fmt.Errorf("%w: node %s still answers at %s; remove it first (leasehold cluster remove %s)",
				ErrIDInUse, a.ID, s.Address, a.ID)
		case string(s.ID) != a.ID && string(s.Address) == a.RaftAddr:
			replaced = append(replaced, s.ID)
		}
	}
	// Entries of the table's highest level may be in the log: a node that
	// cannot apply them would stop at the first. Checked before anything
	// changes, and held (levelMu) until the joiner's record: the leader
	// records no level the joiner was not asked for meanwhile.
	n.levelMu.Lock()
	defer n.levelMu.Unlock()
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	if refresh && !n.isVoter(a.ID) {
		// Checked again here: the node may have been removed while its
		// claim was being confirmed.
		return notMember(a)
	}
	if floor := n.joinFloor(); joiner.level < floor {
		return &UpgradeError{Need: floor, Level: floor, Nodes: []string{fmt.Sprintf("%s (level %d)", a.ID, joiner.level)}}
	}
	for _, id := range replaced {
		if err := n.waitRaft(ctx, n.raft.RemoveServer(id, 0, timeout)); err != nil {
			return err
		}
	}
	if !member {
		if err := n.waitRaft(ctx, n.raft.AddVoter(raft.ServerID(a.ID), raft.ServerAddress(a.RaftAddr), 0, timeout)); err != nil {
			return err
		}
		n.logger.Named("membership").Info("voter_added", "node_id", a.ID, "raft_addr", a.RaftAddr)
	}
	// With its level, when every other voter's recorded level can apply
	// the record (codec 4): the new voter does not pull the cluster's
	// level down until the next asking.
	rec := &fsm.SetNode{NodeID: a.ID, RaftAddr: a.RaftAddr, APIAddr: a.APIAddr}
	withLevel := *rec
	withLevel.Level, withLevel.Version = joiner.level, joiner.version
	if _, level := n.voterLevelsBut(a.ID); withLevel.Validate() == nil && min(level, joiner.level) >= fsm.CodecOf(&withLevel) {
		rec = &withLevel
	}
	_, err = n.raftApplyUnchecked(ctx, rec)
	return err
}

// claimTimeout bounds asking a node to confirm who it is.
func (n *Node) claimTimeout() time.Duration { return min(n.cfg.ApplyTimeout, 5*time.Second) }

// confirmClaim asks the node at a.RaftAddr who it is; it must be a,
// exactly. It returns the node's level and version (levels.go).
func (n *Node) confirmClaim(ctx context.Context, a transport.NodeAddr) (heardLevel, error) {
	if !confirmJoinClaims {
		// The broken chaos_openpeer build: the claim is taken as made.
		return heardLevel{level: n.level()}, nil
	}
	if a.ID == n.id {
		if a != n.self() {
			return heardLevel{}, fmt.Errorf("%w: %s is this node, whose addresses are raft=%s api=%s", ErrClaimRefused, a.ID, n.advertise, n.cfg.APIAddr)
		}
		return heardLevel{level: n.level(), version: n.cfg.Version}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, n.claimTimeout())
	defer cancel()
	var info transport.PeerInfo
	if err := n.peers.CallNode(cctx, a.RaftAddr, a.ID, transport.MethodPeerInfo, transport.PeerInfoRequest{From: n.self()}, &info); err != nil {
		return heardLevel{}, fmt.Errorf("%w: no answer as node %s at %s: %v", ErrClaimRefused, a.ID, a.RaftAddr, err)
	}
	if info.Node != a {
		return heardLevel{}, fmt.Errorf("%w: the node at %s is %s with api %s, not %s with api %s",
			ErrClaimRefused, a.RaftAddr, info.Node.ID, info.Node.APIAddr, a.ID, a.APIAddr)
	}
	h := heardLevel{level: fsm.BaseLevel, version: info.Version}
	if info.Level >= fsm.BaseLevel && info.Level <= 255 {
		h.level = uint8(info.Level)
	}
	return h, nil
}

// answersAs reports whether the node at addr answers as id.
func (n *Node) answersAs(ctx context.Context, addr, id string) bool {
	if addr == n.advertise {
		return id == n.id
	}
	cctx, cancel := context.WithTimeout(ctx, n.claimTimeout())
	defer cancel()
	var info transport.PeerInfo
	err := n.peers.CallNode(cctx, addr, id, transport.MethodPeerInfo, transport.PeerInfoRequest{From: n.self()}, &info)
	return err == nil && info.Node.ID == id
}

func (n *Node) isVoterAt(id, raftAddr string) bool {
	for _, s := range n.voters() {
		if string(s.ID) == id && string(s.Address) == raftAddr {
			return true
		}
	}
	return false
}

// RemoveNode removes a voter and forgets its addresses; on the leader only.
// Removing a node the cluster does not know is an error (fsm.ErrNotFound).
func (n *Node) RemoveNode(ctx context.Context, id string, by Actor) (err error) {
	if err := (&fsm.RemoveNode{NodeID: id}).Validate(); err != nil {
		return err
	}
	if _, err := n.established(); err != nil {
		return err
	}
	defer func() { n.auditAsync(by, "cluster.remove", id+": "+outcome(err)) }()
	// The level check before memberMu (it may take levelMu, see setVoterRecord).
	forget, err := n.checkLevel(ctx, &fsm.RemoveNode{NodeID: id})
	if err != nil {
		return err
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	_, inTable := n.fsm.Node(id)
	if !n.isVoter(id) && !inTable {
		return fmt.Errorf("%w: no node %s in the cluster", fsm.ErrNotFound, id)
	}
	if id == n.id {
		// Raft would stop this node the moment the removal commits, with
		// the node table still naming it and nobody leading. Hand over
		// first; the new leader removes it.
		return fmt.Errorf("%w: %s leads the cluster: transfer leadership first (leasehold cluster transfer-leader)", fsm.ErrInvalidArgument, id)
	}
	if n.isVoter(id) {
		if err := n.waitRaft(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout)); err != nil {
			return err
		}
		n.logger.Named("membership").Info("voter_removed", "node_id", id)
	}
	_, err = n.raftApplyUnchecked(ctx, forget)
	return err
}

// notMember is the refusal of a refresh from a node that is not a voter.
func notMember(a transport.NodeAddr) error {
	return fmt.Errorf("%w: node %s is not a voter (it was removed, or never added): only an explicit join adds it (leasehold cluster join %s %s %s)",
		ErrNotMember, a.ID, a.ID, a.RaftAddr, a.APIAddr)
}

// setVoterRecord writes cmd, a node-table record, if its node is a voter
// now (under memberMu, see Node.memberMu); a record of any other node is
// skipped. unchecked applies as raftApplyUnchecked.
func (n *Node) setVoterRecord(ctx context.Context, cmd *fsm.SetNode, unchecked bool) (written bool, err error) {
	var apply fsm.Command = cmd
	if !unchecked {
		// Before memberMu: the check may record levels, under levelMu,
		// which is taken before memberMu.
		if apply, err = n.checkLevel(ctx, cmd); err != nil {
			return false, err
		}
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	if !n.isVoter(cmd.NodeID) {
		return false, nil
	}
	_, err = n.raftApplyUnchecked(ctx, apply)
	return err == nil, err
}

// outcome is an audit record's result.
func outcome(err error) string {
	if err == nil {
		return "done"
	}
	return "failed: " + err.Error()
}

// TransferLeadership hands leadership to the voter id, or to the most
// up-to-date voter when id is empty; on the leader only.
func (n *Node) TransferLeadership(ctx context.Context, id string, by Actor) (err error) {
	if _, err := n.established(); err != nil {
		return err
	}
	if id == n.id {
		return nil // already leads
	}
	defer func() {
		to := id
		if to == "" {
			to = "any voter"
		}
		n.auditAsync(by, "cluster.transfer", "from "+n.id+" to "+to+": "+outcome(err))
	}()
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
	return n.waitRaft(ctx, f)
}

// NewLeader names the leader after a transfer this node made: the voter
// asked for, or, for "any voter", the one this node hears from first (a
// deposed leader knows its successor only from its first message, within
// an election timeout). Empty when none is heard before ctx ends.
func (n *Node) NewLeader(ctx context.Context, asked string) string {
	if asked != "" {
		return asked
	}
	ctx, cancel := context.WithTimeout(ctx, 2*n.cfg.ElectionTimeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, id := n.raft.LeaderWithID(); id != "" && string(id) != n.id {
			return string(id)
		}
		select {
		case <-ctx.Done():
			return ""
		case <-tick.C:
		}
	}
}
