package cluster

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/transport"
)

// Hooks for the tests of package cluster_test; compiled into tests only.

// ExpiryResolution is the shortest wait between two passes of the timer
// loop that a worker's check asks for.
const ExpiryResolution = expiryResolution

// SayLevel has the node say it is at level l, as a node of an older build
// does (l = fsm.BaseLevel: a build from before levels).
func SayLevel(c *Config, l uint8) { c.sayLevel = l }

// AskLevelsEvery sets how often the leader asks the voters for their levels.
func AskLevelsEvery(c *Config, d time.Duration) { c.levelEvery = d }

// RaftSnapshot has Raft take a snapshot now and waits until it is on disk.
func (n *Node) RaftSnapshot() error { return n.raft.Snapshot().Error() }

// ApplyRaw proposes data as a log entry, unchecked (what a leader with
// damaged memory would send), and returns its index.
func (n *Node) ApplyRaw(data []byte) (uint64, error) {
	f := n.raft.Apply(data, 5*time.Second)
	err := f.Error() // Index is set once Error returns
	return f.Index(), err
}

// ParkedAcquires is how many acquires wait for a job on the node.
func (n *Node) ParkedAcquires() int64 { return n.parked.Load() }

// AskRefreshVia sends the request a running node sends when its entry in
// the node table is missing or stale (reconcileSelf) to the node at addr.
func (n *Node) AskRefreshVia(ctx context.Context, addr string) error {
	return n.askJoin(ctx, addr, true)
}

// HoldRefresh has the node skip its node-table refresh (and, leading, its
// writes of discovered voters' records) while hold is true.
func HoldRefresh(c *Config, hold *atomic.Bool) { c.holdRefresh = hold }

// RefreshRefused says whether the node's last refresh was refused because
// it is not a member.
func (n *Node) RefreshRefused() bool { return n.refreshRefused.Load() }

// AfterClaim has the leader call f(id) in AddNode once id's claim is
// confirmed, before it looks at the voters again and changes anything.
func AfterClaim(c *Config, f func(id string)) { c.afterClaim = f }

// HintLeader stores a fresh leader hint for id and api, as Leader does
// after it answers them.
func (n *Node) HintLeader(id, api string) {
	n.hint.Store(&leaderHint{id: id, api: api, at: time.Now()})
}

// MarkStood records a stand of the dead-leader check now, as checkDeadLeader
// does before it sends the TimeoutNow.
func (n *Node) MarkStood() { n.markStood() }

// RaftLastContact is when this node's Raft last heard from a leader (or
// granted a vote).
func (n *Node) RaftLastContact() time.Time { return n.raft.LastContact() }

// AskPeerInfo asks the node at addr (with id) for its peer.info, as the
// dead-leader check does.
func (n *Node) AskPeerInfo(ctx context.Context, addr, id string) (transport.PeerInfo, error) {
	var info transport.PeerInfo
	err := n.peers.CallNode(ctx, addr, id, transport.MethodPeerInfo, transport.PeerInfoRequest{From: n.self()}, &info)
	return info, err
}
