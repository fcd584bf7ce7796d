package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
)

// Admin actions (and refused attempts at them) become replicated audit
// events. Any node may see one; the leader proposes it. A follower sends
// its records to the leader over the peer port.

// auditQueueLen bounds the audit records waiting to be sent: a flood of
// refusals is dropped (and counted) rather than queued without end.
const auditQueueLen = 256

type auditor struct {
	queue   chan fsm.Audit
	dropped atomic.Uint64
}

// Audit records a, waiting for the outcome (bounded by ctx): proposed here
// on the leader, sent to the leader otherwise.
func (n *Node) Audit(ctx context.Context, a fsm.Audit) error {
	if err := a.Validate(); err != nil {
		return err
	}
	if _, err := n.established(); err == nil {
		_, err = n.raftApply(ctx, &a)
		return err
	}
	id, addr, err := n.leaderPeer()
	if err != nil {
		return err
	}
	return n.peers.CallNode(ctx, addr, id, transport.MethodPeerAudit,
		transport.PeerAuditRequest{Action: a.Action, Actor: a.Actor, Source: a.Source, Detail: a.Detail}, nil)
}

// AuditAsync queues a without waiting. When the queue is full the record is
// dropped and counted (AuditsDropped): audits of refusals must not become a
// way to slow a node down.
func (n *Node) AuditAsync(a fsm.Audit) {
	select {
	case n.audits.queue <- a:
	default:
		n.audits.dropped.Add(1)
	}
}

// AuditsDropped counts audit records dropped because the queue was full or
// no leader took them.
func (n *Node) AuditsDropped() uint64 { return n.audits.dropped.Load() }

// auditLoop sends queued records until the node stops. A record waits
// out an election (up to ApplyTimeout): an action that moved leadership is
// recorded by the new leader.
func (n *Node) auditLoop() {
	for {
		select {
		case a := <-n.audits.queue:
			ctx, cancel := context.WithTimeout(n.life, n.cfg.ApplyTimeout)
			err := n.auditRetrying(ctx, a)
			cancel()
			if err != nil {
				n.audits.dropped.Add(1)
				n.logger.Named("audit").Warn("audit_not_recorded", "action", a.Action, "actor", a.Actor, "error", err)
			}
		case <-n.life.Done():
			return
		}
	}
}

func (n *Node) auditRetrying(ctx context.Context, a fsm.Audit) error {
	wait := 10 * time.Millisecond
	for {
		err := n.Audit(ctx, a)
		var remote *transport.RPCError
		retry := errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNotReady) ||
			errors.Is(err, ErrLeadershipLost) || errors.As(err, &remote) && (remote.Code == transport.CodeNoLeader || remote.Code == transport.CodeNotLeader ||
			remote.Code == transport.CodeNotReady)
		if err == nil || !retry {
			return err
		}
		select {
		case <-time.After(wait):
			wait = min(2*wait, 500*time.Millisecond)
		case <-ctx.Done():
			return err
		}
	}
}

// handlePeerAudit takes an audit record from another node. With peer TLS
// only an authenticated member may send one.
func (n *Node) handlePeerAudit(ctx context.Context, body json.RawMessage) (any, error) {
	peer, _ := transport.PeerFromContext(ctx)
	if n.mux.PeerTLS() && !peer.Authenticated {
		return nil, &rpcError{code: transport.CodeForbidden, err: fmt.Errorf("audit records come only from members")}
	}
	var req transport.PeerAuditRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, &rpcError{code: transport.CodeForbidden, err: fmt.Errorf("bad audit record: %w", err)}
	}
	a := fsm.Audit{Action: req.Action, Actor: req.Actor, Source: req.Source, Detail: req.Detail}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	if _, err := n.established(); err != nil {
		return nil, peerError(err)
	}
	if _, err := n.raftApply(ctx, &a); err != nil {
		return nil, peerError(err)
	}
	return nil, nil
}

// leaderPeer returns the leader's id and its Raft address as the Raft
// configuration has them: the only place this node sends anything on a
// caller's behalf.
func (n *Node) leaderPeer() (id, raftAddr string, err error) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", "", ErrNoLeader
	}
	if addr, ok := n.voterAddr(lid); ok {
		return string(lid), addr, nil
	}
	return "", "", fmt.Errorf("%w: leader %s is not in the configuration", ErrNoLeader, lid)
}

// RefusalLimiter limits the audit records refusals produce: one per key
// (source host, identity, what was refused) per refusalWindow, and
// refusalRate a second in all, so a flood of refused attempts cannot push
// real events out of the retained log.
type RefusalLimiter struct {
	mu      sync.Mutex
	last    map[string]time.Time
	limiter *rate.Limiter
}

const (
	refusalWindow  = 10 * time.Second
	refusalRate    = 5
	refusalKeysMax = 4096
)

// NewRefusalLimiter returns an empty limiter.
func NewRefusalLimiter() *RefusalLimiter {
	return &RefusalLimiter{last: map[string]time.Time{}, limiter: rate.NewLimiter(refusalRate, 4*refusalRate)}
}

// Allow reports whether a refusal under key may be recorded now.
func (f *RefusalLimiter) Allow(key string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.last[key]; ok && now.Sub(t) < refusalWindow {
		return false
	}
	if !f.limiter.AllowN(now, 1) {
		return false
	}
	if len(f.last) >= refusalKeysMax {
		clear(f.last)
	}
	f.last[key] = now
	return true
}

// auditRefusal records a refused peer request, at the refusals' rate.
func (n *Node) auditRefusal(by Actor, action, detail string) {
	host, _, _ := net.SplitHostPort(by.Source)
	if n.refusals.Allow(host+"|"+by.Name+"|"+action+"|"+detail, time.Now()) {
		n.auditAsync(by, action, detail)
	}
}
