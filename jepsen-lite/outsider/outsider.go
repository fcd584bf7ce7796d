package outsider

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

// Process is the outsider's name in the history.
const Process = "outsider"

// Node is a member the outsider attacks.
type Node struct {
	ID, RaftAddr, APIAddr string
}

// Config places the outsider and names its targets.
type Config struct {
	// IP is the outsider's own address, no member's: it dials from it and
	// listens on it (its peer port at RaftPort, its capture server at
	// CapturePort).
	IP                    string
	RaftPort, CapturePort int
	Nodes                 []Node
	// Leader names the node leading now; an error when none does.
	Leader func(ctx context.Context) (string, error)
	// ClientCert, in a secure run, is TLS presenting an API client
	// certificate of the cluster's CA. Nil: the run is insecure, and only
	// attempts an open peer port must refuse are made.
	ClientCert *tls.Config
	Rec        *history.Recorder
	Logger     hclog.Logger
	// CallTimeout bounds one attempt; it must leave the node time to ask
	// the outsider who it is. Default 6 s.
	CallTimeout time.Duration
}

// Terms the forged Raft messages carry: one no cluster reaches (raft adds
// to terms without checking for overflow), and, in secure runs only, one in
// range, far ahead of any real term: accepted, it would move every node
// there.
const (
	termOutOfRange = 1<<64 - 1
	termInRange    = 1 << 40
)

// Outsider attacks the nodes; Attack runs the attacks, Close stops
// listening.
type Outsider struct {
	cfg     Config
	log     hclog.Logger
	plain   *endpoint // plain TCP, and the peer port its claims name
	tls     *endpoint // TLS with the client certificate; nil when insecure
	capture *capture

	// claim is who the outsider's peer port says it is when a node asks
	// (peer.info): the member it impersonates.
	claim atomic.Pointer[transport.NodeAddr]
	// attacking keeps Attack to one caller at a time: claim is per
	// attempt.
	attacking sync.Mutex
}

// New starts listening: the outsider's peer port (answering peer.info)
// and its capture server.
func New(cfg Config) (*Outsider, error) {
	if cfg.IP == "" || len(cfg.Nodes) == 0 || cfg.Leader == nil || cfg.Rec == nil {
		return nil, errors.New("outsider: needs an address, nodes, a leader finder and a recorder")
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 6 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	o := &Outsider{cfg: cfg, log: cfg.Logger}
	var err error
	if o.capture, err = listenCapture(net.JoinHostPort(cfg.IP, strconv.Itoa(cfg.CapturePort)), cfg.Rec, o.log); err != nil {
		return nil, err
	}
	if o.plain, err = o.newEndpoint(history.ViaTCP, net.JoinHostPort(cfg.IP, strconv.Itoa(cfg.RaftPort)), nil); err != nil {
		o.Close()
		return nil, err
	}
	o.plain.rpc.Handle(transport.MethodPeerInfo, o.peerInfo)
	if cfg.ClientCert != nil {
		if o.tls, err = o.newEndpoint(history.ViaClientCert, net.JoinHostPort(cfg.IP, "0"), cfg.ClientCert); err != nil {
			o.Close()
			return nil, err
		}
	}
	return o, nil
}

// Secure reports whether the outsider attacks a secure run.
func (o *Outsider) Secure() bool { return o.tls != nil }

// RaftAddr is the outsider's own peer port, which its joins name.
func (o *Outsider) RaftAddr() string { return o.plain.mux.Addr().String() }

// CaptureAddr is the capture server's address.
func (o *Outsider) CaptureAddr() string { return o.capture.addr() }

// Captured is how many connections the capture server received.
func (o *Outsider) Captured() int { return o.capture.count() }

// Close stops listening and waits for the outsider's goroutines.
func (o *Outsider) Close() error {
	var errs []error
	for _, ep := range []*endpoint{o.tls, o.plain} {
		if ep != nil {
			errs = append(errs, ep.close())
		}
	}
	if o.capture != nil {
		errs = append(errs, o.capture.close())
	}
	return errors.Join(errs...)
}

// peerInfo answers as the member the outsider impersonates: the node a
// join-impostor names finds that member's id at the outsider's address.
func (o *Outsider) peerInfo(context.Context, json.RawMessage) (any, error) {
	info := transport.PeerInfo{InCluster: true}
	if c := o.claim.Load(); c != nil {
		info.Node = *c
	}
	return info, nil
}

// Attack attacks every node, a round every interval, until ctx ends.
func (o *Outsider) Attack(ctx context.Context, every time.Duration) {
	o.attacking.Lock()
	defer o.attacking.Unlock()
	attempts, accepted := 0, 0
	for round := 0; ctx.Err() == nil; round++ {
		n, a := o.round(ctx, round)
		attempts, accepted = attempts+n, accepted+a
		t := time.NewTimer(every)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	o.log.Info("attacks stopped", "attempts", attempts, "accepted", accepted, "captured", o.Captured())
}

// round is one attempt of every attack at every node; the impostor claims
// the id of a member chosen by the round. It returns how many attempts it
// made and how many were accepted.
func (o *Outsider) round(ctx context.Context, round int) (attempts, accepted int) {
	nodes := o.cfg.Nodes
	victim := nodes[round%len(nodes)]
	capture := o.CaptureAddr()
	stranger := transport.NodeAddr{ID: "intruder", RaftAddr: o.RaftAddr(), APIAddr: capture}
	impostor := transport.NodeAddr{ID: victim.ID, RaftAddr: o.RaftAddr(), APIAddr: capture}
	var takeover *transport.NodeAddr
	lctx, cancel := context.WithTimeout(ctx, o.cfg.CallTimeout)
	leader, err := o.cfg.Leader(lctx)
	cancel()
	if err == nil {
		for _, n := range nodes {
			if n.ID == leader {
				takeover = &transport.NodeAddr{ID: n.ID, RaftAddr: n.RaftAddr, APIAddr: capture}
			}
		}
	}
	endpoints := []*endpoint{o.plain}
	if o.tls != nil {
		endpoints = append(endpoints, o.tls)
	}
	record := func(a history.Attempt) {
		attempts++
		if a.Accepted {
			accepted++
			o.log.Warn("attempt accepted", "attack", a.Attack, "node", a.Node, "via", a.Via)
		}
		o.cfg.Rec.Append(history.Entry{Kind: history.KindOutsiderAttempt, Process: Process, Attempt: &a})
	}
	for _, n := range nodes {
		for _, ep := range endpoints {
			if ctx.Err() != nil {
				return attempts, accepted
			}
			o.claim.Store(&impostor)
			record(o.join(ctx, ep, n, history.AttackJoinStranger, stranger))
			if takeover != nil {
				record(o.join(ctx, ep, n, history.AttackJoinTakeover, *takeover))
			}
			record(o.join(ctx, ep, n, history.AttackJoinImpostor, impostor))
			terms := []uint64{termOutOfRange}
			if o.tls != nil {
				terms = append(terms, termInRange)
			}
			for _, term := range terms {
				record(o.raftRPC(ep, n, victim, history.AttackRaftAppend, term))
				record(o.raftRPC(ep, n, victim, history.AttackRaftVote, term))
			}
			if o.tls != nil {
				record(o.raftRPC(ep, n, victim, history.AttackRaftTimeoutNow, 0))
			}
		}
	}
	return attempts, accepted
}

// join asks node n to add claim, through ep.
func (o *Outsider) join(ctx context.Context, ep *endpoint, n Node, attack string, claim transport.NodeAddr) history.Attempt {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.CallTimeout)
	defer cancel()
	var reply transport.PeerJoinReply
	err := ep.mux.RPCClient().Call(ctx, n.RaftAddr, transport.MethodPeerJoin, transport.PeerJoinRequest{Node: claim}, &reply)
	a := history.Attempt{Attack: attack, Node: n.ID, Via: ep.via, Accepted: err == nil,
		Claim: &history.Member{ID: claim.ID, RaftAddr: claim.RaftAddr, APIAddr: claim.APIAddr}}
	describe(&a, err)
	return a
}

// raftRPC sends node n one Raft message of the kind attack names, as if
// from member from.
func (o *Outsider) raftRPC(ep *endpoint, n Node, from Node, attack string, term uint64) history.Attempt {
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(from.ID), Addr: []byte(from.RaftAddr)}
	id, target := raft.ServerID(n.ID), raft.ServerAddress(n.RaftAddr)
	var err error
	switch attack {
	case history.AttackRaftAppend:
		err = ep.raft.AppendEntries(id, target, &raft.AppendEntriesRequest{RPCHeader: header, Term: term}, &raft.AppendEntriesResponse{})
	case history.AttackRaftVote:
		err = ep.raft.RequestVote(id, target, &raft.RequestVoteRequest{RPCHeader: header, Term: term,
			Candidate: []byte(from.RaftAddr)}, &raft.RequestVoteResponse{})
	case history.AttackRaftTimeoutNow:
		err = ep.raft.TimeoutNow(id, target, &raft.TimeoutNowRequest{RPCHeader: header}, &raft.TimeoutNowResponse{})
	default:
		err = fmt.Errorf("outsider: no Raft attack %q", attack)
	}
	a := history.Attempt{Attack: attack, Node: n.ID, Via: ep.via, Term: term, Accepted: err == nil}
	describe(&a, err)
	return a
}

// describe fills in how an attempt failed: a peer RPC's refusal code, or
// the error.
func describe(a *history.Attempt, err error) {
	if err == nil {
		return
	}
	var rerr *transport.RPCError
	if errors.As(err, &rerr) {
		a.Code = rerr.Code
	}
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	a.Error = msg
}
