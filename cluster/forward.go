package cluster

import (
	"context"
	"fmt"
	"net"
)

// A follower forwards an API request to the leader over the peer port (the
// Mux's API connection type), never over the leader's public API port: the
// connection is dialed only to an address in the Raft configuration, and
// with peer TLS it reaches the node that address belongs to or nobody. The
// leader then knows which member forwarded the request, so the member can
// vouch for the caller's identity instead of passing its credentials on.

// PeerAPIListener yields the API requests other members forward to this
// node. The API serves it beside its public port; transport.PeerOf tells
// which member sent each connection.
func (n *Node) PeerAPIListener() net.Listener { return n.mux.APIListener() }

// PeerTLS reports whether the peer port runs mutual TLS, so a forwarded
// request's sender is authenticated.
func (n *Node) PeerTLS() bool { return n.mux.PeerTLS() }

// DialPeerAPI opens a forwarding connection to the voter whose Raft address
// is raftAddr. An address that no voter has is refused, so a request (and
// anything it carries) only ever reaches a member.
func (n *Node) DialPeerAPI(ctx context.Context, raftAddr string) (net.Conn, error) {
	for _, s := range n.voters() {
		if string(s.Address) == raftAddr {
			return n.mux.DialAPI(ctx, raftAddr, string(s.ID))
		}
	}
	return nil, fmt.Errorf("%w: %s is no voter's address", ErrNotLeader, raftAddr)
}
