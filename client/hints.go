package client

import (
	"context"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Leader hints (the Leasehold-Leader header, a NOT_LEADER's leader_api) are
// followed only to a configured endpoint or to an API address the cluster
// listed in a Members answer. A hint is only a claim in a reply; following
// any host:port it names would let one poisoned reply, or one wrong node,
// send the client's requests and bearer token anywhere. A hint naming an
// address the client does not know makes it read the member list again
// (from the configured endpoints, not the node that gave the hint), at
// most once per minMembersRefresh, so a stream of bad hints costs one
// Members call a second, not one each.

// Bounds of a members refresh.
const (
	minMembersRefresh     = time.Second     // from the end of one to the start of the next
	membersRefreshTimeout = 2 * time.Second // the whole refresh, capped by CallTimeout
)

// follow adopts the leader an answer named in its Leasehold-Leader header,
// if admit lets it.
func (c *Client) follow(ctx context.Context, hdr http.Header) {
	if leader := hdr.Get(transport.HeaderLeader); leader != "" && c.admit(ctx, leader) {
		c.pin(leader)
	}
}

// pin makes addr the current endpoint, unless it is no longer one the
// client may use (a refresh between admit and pin dropped it).
func (c *Client) pin(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.allowedLocked(addr) {
		return false
	}
	c.current = addr
	return true
}

// allowedLocked reports whether the client may send requests to addr.
func (c *Client) allowedLocked(addr string) bool {
	return c.members[addr] || slices.Contains(c.cfg.Endpoints, addr)
}

// admit reports whether a hint may move the pin to addr. An address that is
// host:port but neither configured nor listed makes it refresh the member
// list first, unless the last refresh ended less than minMembersRefresh
// ago; a caller that finds a refresh in flight waits for its result instead
// of starting another.
func (c *Client) admit(ctx context.Context, addr string) bool {
	if checkEndpoint(addr) != nil {
		return false
	}
	c.mu.Lock()
	for c.listing != nil && !c.allowedLocked(addr) {
		listing := c.listing
		c.mu.Unlock()
		select {
		case <-listing:
		case <-ctx.Done():
			return false
		}
		c.mu.Lock()
	}
	if c.allowedLocked(addr) {
		c.mu.Unlock()
		return true
	}
	if !c.listed.IsZero() && c.now().Sub(c.listed) < minMembersRefresh {
		c.mu.Unlock()
		return false
	}
	listing := make(chan struct{})
	c.listing = listing
	c.mu.Unlock()

	addrs, err := c.listMembers(ctx)

	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.adoptMembersLocked(addrs)
	}
	c.listed = c.now()
	c.listing = nil
	close(listing)
	return c.allowedLocked(addr)
}

// adoptMembersLocked replaces the member list. A pin on a node the cluster
// no longer lists moves back to the configured endpoints, and the generated
// clients of such nodes are dropped.
func (c *Client) adoptMembersLocked(addrs []string) {
	c.members = make(map[string]bool, len(addrs))
	for _, a := range addrs {
		c.members[a] = true
	}
	if !c.allowedLocked(c.current) {
		c.current = c.cfg.Endpoints[c.next]
	}
	for a := range c.stubs {
		if !c.allowedLocked(a) {
			delete(c.stubs, a)
		}
	}
}

// listMembers reads the cluster's API addresses from the configured
// endpoints, the current one first when it is configured, until one
// answers. It calls the generated client directly, not through call, so
// the answer's own leader header is not followed and a refresh never starts
// another.
func (c *Client) listMembers(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, min(membersRefreshTimeout, c.cfg.CallTimeout))
	defer cancel()
	c.mu.Lock()
	first := c.next
	if i := slices.Index(c.cfg.Endpoints, c.current); i >= 0 {
		first = i
	}
	order := make([]*endpoints, len(c.cfg.Endpoints))
	for i := range order {
		order[i] = c.stubsLocked(c.cfg.Endpoints[(first+i)%len(order)])
	}
	c.mu.Unlock()

	var err error
	for _, ep := range order {
		req := connect.NewRequest(&leaseholdv1.MembersRequest{})
		c.authorize(req.Header())
		var resp *connect.Response[leaseholdv1.MembersResponse]
		if resp, err = ep.cluster.Members(ctx, req); err == nil {
			var addrs []string
			for _, m := range resp.Msg.GetMembers() {
				if a := m.GetApiAddr(); checkEndpoint(a) == nil {
					addrs = append(addrs, a)
				}
			}
			return addrs, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, err
}
