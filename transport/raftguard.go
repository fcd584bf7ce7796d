package transport

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// MaxRaftValue bounds every term and log index a RaftGuard lets through: a
// value at or above it is refused. No real cluster gets near it (a new term
// every millisecond takes over a hundred million years to reach it), and raft
// adds to terms without checking for overflow: one AppendEntries with Term
// 2^64-1 wraps every node's term to 0 at the next election and leaves the
// cluster without a leader for good.
const MaxRaftValue uint64 = 1 << 62

// maxFromLen bounds each part (id, address) of the sender named in a log.
const maxFromLen = 64

// RaftGuard wraps a raft.Transport and refuses, before raft sees them,
// incoming RPCs that carry a term or log index of MaxRaftValue or more, a
// nil log entry, or a command type raft never sends. A refused RPC is
// answered at once with an error wrapping ErrRaftRPCRefused that names the
// field and the value, logged at Warn and counted. It also refuses the
// answers to this node's own vote and pre-vote requests when their term is
// out of bounds, because raft adopts a newer term from those answers.
//
// Everything else passes straight through. Requests reach raft through one
// goroutine that checks each and forwards it unchanged to Consumer;
// heartbeats, which raft's NetworkTransport hands to the heartbeat handler
// directly, are checked in that handler.
//
// RaftGuard implements raft.WithClose and raft.WithPreVote. Raft turns
// pre-vote on when its transport implements WithPreVote, so GuardRaft
// accepts only a transport that implements it too (NetworkTransport and
// InmemTransport do): the guard never advertises what the inner transport
// cannot do.
//
// A refused InstallSnapshot is answered without reading its data, so that a
// sender that never finishes cannot hold the guard up; a NetworkTransport
// then reads that data as the next request on the connection, which
// normally fails to decode and drops the connection.
type RaftGuard struct {
	inner   raft.Transport
	preVote raft.WithPreVote
	logger  hclog.Logger

	out       chan raft.RPC
	done      chan struct{} // closed by Close: forward returns
	closeOnce sync.Once
	wg        sync.WaitGroup

	// Heartbeats run raft's handler on the transport's own goroutines,
	// which raft's Shutdown does not wait for: Close waits for those in
	// flight (hb), and refuses later ones, so that nothing writes a term
	// to a store closed after Close returns.
	hbMu     sync.Mutex
	hbClosed bool
	hb       sync.WaitGroup

	drops [numRaftKinds]atomic.Uint64
}

var (
	_ raft.Transport   = (*RaftGuard)(nil)
	_ raft.WithClose   = (*RaftGuard)(nil)
	_ raft.WithPreVote = (*RaftGuard)(nil)
)

// GuardRaft wraps inner, which must implement raft.WithPreVote, and starts
// checking its incoming RPCs. The guard owns inner from then on: hand the
// guard to raft.NewRaft instead of inner, and Close the guard (raft does, on
// Shutdown), which closes inner if it implements raft.WithClose.
func GuardRaft(inner raft.Transport, logger hclog.Logger) (*RaftGuard, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: raft transport is nil", ErrInvalidConfig)
	}
	preVote, ok := inner.(raft.WithPreVote)
	if !ok {
		return nil, fmt.Errorf("%w: raft transport %T does not implement raft.WithPreVote", ErrInvalidConfig, inner)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	g := &RaftGuard{
		inner:   inner,
		preVote: preVote,
		logger:  logger.Named("raft-guard"),
		out:     make(chan raft.RPC),
		done:    make(chan struct{}),
	}
	g.wg.Add(1)
	go g.forward()
	return g, nil
}

// forward checks each RPC from inner and hands it to Consumer, or refuses
// it. An RPC it holds when Close comes is answered, never dropped.
func (g *RaftGuard) forward() {
	defer g.wg.Done()
	in := g.inner.Consumer()
	for {
		select {
		case rpc, ok := <-in:
			if !ok {
				return
			}
			if r, ok := checkRaftCommand(rpc.Command); !ok {
				g.refuse(rpc, r)
				continue
			}
			select {
			case g.out <- rpc:
			case <-g.done:
				rpc.Respond(nil, raft.ErrTransportShutdown)
				return
			}
		case <-g.done:
			return
		}
	}
}

// Close closes inner (if it implements raft.WithClose), stops the
// forwarding goroutine and answers the RPCs still queued in inner with
// raft.ErrTransportShutdown. It returns inner's Close error; calls after the
// first return nil.
func (g *RaftGuard) Close() error {
	var err error
	g.closeOnce.Do(func() {
		if c, ok := g.inner.(raft.WithClose); ok {
			err = c.Close()
		}
		g.hbMu.Lock()
		g.hbClosed = true
		g.hbMu.Unlock()
		g.hb.Wait()
		close(g.done)
		g.wg.Wait()
		// A closed inner queues nothing new; answer what it already holds.
		in := g.inner.Consumer()
		for {
			select {
			case rpc, ok := <-in:
				if !ok {
					return
				}
				rpc.Respond(nil, raft.ErrTransportShutdown)
			default:
				return
			}
		}
	})
	return err
}

// Consumer returns the checked RPCs.
func (g *RaftGuard) Consumer() <-chan raft.RPC { return g.out }

// SetHeartbeatHandler installs cb behind a check: a heartbeat out of bounds
// is answered with an error and counted, and never reaches cb. A nil cb
// removes the handler.
func (g *RaftGuard) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		g.inner.SetHeartbeatHandler(nil)
		return
	}
	g.inner.SetHeartbeatHandler(func(rpc raft.RPC) {
		g.hbMu.Lock()
		if g.hbClosed {
			g.hbMu.Unlock()
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
		g.hb.Add(1)
		g.hbMu.Unlock()
		defer g.hb.Done()
		if r, ok := checkRaftCommand(rpc.Command); !ok {
			if r.kind == kindAppendEntries {
				r.kind = kindHeartbeat
			}
			g.refuse(rpc, r)
			return
		}
		cb(rpc)
	})
}

// RequestVote sends a vote request and refuses an answer whose term is out
// of bounds: raft would adopt it.
func (g *RaftGuard) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := g.inner.RequestVote(id, target, args, resp); err != nil {
		return err
	}
	if resp.Term >= MaxRaftValue {
		term := resp.Term
		*resp = raft.RequestVoteResponse{}
		return g.refuseAnswer(kindRequestVoteResponse, id, target, term)
	}
	return nil
}

// RequestPreVote sends a pre-vote request and refuses an answer whose term
// is out of bounds: raft would adopt it.
func (g *RaftGuard) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if err := g.preVote.RequestPreVote(id, target, args, resp); err != nil {
		return err
	}
	if resp.Term >= MaxRaftValue {
		term := resp.Term
		*resp = raft.RequestPreVoteResponse{}
		return g.refuseAnswer(kindRequestPreVoteResponse, id, target, term)
	}
	return nil
}

// The rest of raft.Transport passes straight through. Answers to
// AppendEntries and InstallSnapshot are not checked: a newer term there
// makes a leader step down but is not adopted.

func (g *RaftGuard) LocalAddr() raft.ServerAddress { return g.inner.LocalAddr() }

func (g *RaftGuard) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	return g.inner.AppendEntriesPipeline(id, target)
}

func (g *RaftGuard) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return g.inner.AppendEntries(id, target, args, resp)
}

func (g *RaftGuard) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return g.inner.InstallSnapshot(id, target, args, resp, data)
}

func (g *RaftGuard) EncodePeer(id raft.ServerID, addr raft.ServerAddress) []byte {
	return g.inner.EncodePeer(id, addr)
}

func (g *RaftGuard) DecodePeer(buf []byte) raft.ServerAddress { return g.inner.DecodePeer(buf) }

func (g *RaftGuard) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return g.inner.TimeoutNow(id, target, args, resp)
}

// RaftDrops counts the RPCs a RaftGuard refused, by kind.
type RaftDrops struct {
	AppendEntries   uint64 // through Consumer
	Heartbeat       uint64 // through the heartbeat handler
	RequestVote     uint64
	RequestPreVote  uint64
	InstallSnapshot uint64
	TimeoutNow      uint64
	Unknown         uint64 // a command type raft never sends
	// Answers to this node's own requests.
	RequestVoteResponse    uint64
	RequestPreVoteResponse uint64
}

// Total is the sum of all kinds.
func (d RaftDrops) Total() uint64 {
	return d.AppendEntries + d.Heartbeat + d.RequestVote + d.RequestPreVote + d.InstallSnapshot +
		d.TimeoutNow + d.Unknown + d.RequestVoteResponse + d.RequestPreVoteResponse
}

// Drops returns the refusals so far, by kind.
func (g *RaftGuard) Drops() RaftDrops {
	return RaftDrops{
		AppendEntries:          g.drops[kindAppendEntries].Load(),
		Heartbeat:              g.drops[kindHeartbeat].Load(),
		RequestVote:            g.drops[kindRequestVote].Load(),
		RequestPreVote:         g.drops[kindRequestPreVote].Load(),
		InstallSnapshot:        g.drops[kindInstallSnapshot].Load(),
		TimeoutNow:             g.drops[kindTimeoutNow].Load(),
		Unknown:                g.drops[kindUnknown].Load(),
		RequestVoteResponse:    g.drops[kindRequestVoteResponse].Load(),
		RequestPreVoteResponse: g.drops[kindRequestPreVoteResponse].Load(),
	}
}

// Dropped returns the number of refusals so far, of every kind.
func (g *RaftGuard) Dropped() uint64 { return g.Drops().Total() }

// raftKind is what a refused message was; it indexes RaftGuard.drops.
type raftKind int

const (
	kindAppendEntries raftKind = iota
	kindHeartbeat
	kindRequestVote
	kindRequestPreVote
	kindInstallSnapshot
	kindTimeoutNow
	kindUnknown
	kindRequestVoteResponse
	kindRequestPreVoteResponse
	numRaftKinds
)

var raftKindNames = [numRaftKinds]string{
	kindAppendEntries:          "AppendEntries",
	kindHeartbeat:              "Heartbeat",
	kindRequestVote:            "RequestVote",
	kindRequestPreVote:         "RequestPreVote",
	kindInstallSnapshot:        "InstallSnapshot",
	kindTimeoutNow:             "TimeoutNow",
	kindUnknown:                "unknown",
	kindRequestVoteResponse:    "RequestVoteResponse",
	kindRequestPreVoteResponse: "RequestPreVoteResponse",
}

func (k raftKind) String() string { return raftKindNames[k] }

// refusal says why a message was refused. It is built without allocating;
// the words are put together only when a message is refused.
type refusal struct {
	kind  raftKind
	field string // "Term", "PrevLogEntry"...; an entry's "Index" or "Term"; "" for a nil entry
	entry int    // the index into Entries for an entry's field or a nil entry; -1 otherwise
	value uint64
	cmd   any // the command, for naming an unknown type
}

// fieldName is the refused field as the error and the log name it.
func (r refusal) fieldName() string {
	switch {
	case r.kind == kindUnknown:
		return "Command"
	case r.entry < 0:
		return r.field
	case r.field == "":
		return "Entries[" + strconv.Itoa(r.entry) + "]"
	default:
		return "Entries[" + strconv.Itoa(r.entry) + "]." + r.field
	}
}

// valueString is the refused value: a number, "nil" or a Go type.
func (r refusal) valueString() string {
	switch {
	case r.kind == kindUnknown:
		return fmt.Sprintf("%T", r.cmd)
	case r.entry >= 0 && r.field == "":
		return "nil"
	default:
		return strconv.FormatUint(r.value, 10)
	}
}

// err is the answer to the sender. Its text must never contain "unexpected
// command": raft reads a pre-vote error saying so as a grant.
func (r refusal) err() error {
	switch {
	case r.kind == kindUnknown:
		return fmt.Errorf("%w: unknown command type %s", ErrRaftRPCRefused, r.valueString())
	case r.entry >= 0 && r.field == "":
		return fmt.Errorf("%w: %s %s is nil", ErrRaftRPCRefused, r.kind, r.fieldName())
	default:
		return fmt.Errorf("%w: %s %s = %d, not below %d", ErrRaftRPCRefused, r.kind, r.fieldName(), r.value, MaxRaftValue)
	}
}

// checkRaftCommand reports whether every term and index in cmd is below
// MaxRaftValue and cmd is a type raft sends; if not, it says why.
func checkRaftCommand(cmd any) (refusal, bool) {
	switch c := cmd.(type) {
	case *raft.AppendEntriesRequest:
		k := kindAppendEntries
		if r, ok := bound(k, "Term", c.Term); !ok {
			return r, false
		}
		if r, ok := bound(k, "PrevLogEntry", c.PrevLogEntry); !ok {
			return r, false
		}
		if r, ok := bound(k, "PrevLogTerm", c.PrevLogTerm); !ok {
			return r, false
		}
		if r, ok := bound(k, "LeaderCommitIndex", c.LeaderCommitIndex); !ok {
			return r, false
		}
		for i, e := range c.Entries {
			// Raft would dereference a nil entry in its main loop; the
			// wire format can carry one.
			if e == nil {
				return refusal{kind: k, entry: i}, false
			}
			if e.Index >= MaxRaftValue {
				return refusal{kind: k, field: "Index", entry: i, value: e.Index}, false
			}
			if e.Term >= MaxRaftValue {
				return refusal{kind: k, field: "Term", entry: i, value: e.Term}, false
			}
		}
		return refusal{}, true
	case *raft.RequestVoteRequest:
		k := kindRequestVote
		if r, ok := bound(k, "Term", c.Term); !ok {
			return r, false
		}
		if r, ok := bound(k, "LastLogIndex", c.LastLogIndex); !ok {
			return r, false
		}
		return bound(k, "LastLogTerm", c.LastLogTerm)
	case *raft.RequestPreVoteRequest:
		k := kindRequestPreVote
		if r, ok := bound(k, "Term", c.Term); !ok {
			return r, false
		}
		if r, ok := bound(k, "LastLogIndex", c.LastLogIndex); !ok {
			return r, false
		}
		return bound(k, "LastLogTerm", c.LastLogTerm)
	case *raft.InstallSnapshotRequest:
		k := kindInstallSnapshot
		if r, ok := bound(k, "Term", c.Term); !ok {
			return r, false
		}
		if r, ok := bound(k, "LastLogIndex", c.LastLogIndex); !ok {
			return r, false
		}
		if r, ok := bound(k, "LastLogTerm", c.LastLogTerm); !ok {
			return r, false
		}
		return bound(k, "ConfigurationIndex", c.ConfigurationIndex)
	case *raft.TimeoutNowRequest:
		// It carries no term or index in raft v1.7.3: the receiver starts
		// an election at its own term plus one.
		return refusal{}, true
	default:
		return refusal{kind: kindUnknown, entry: -1, cmd: cmd}, false
	}
}

func bound(k raftKind, field string, v uint64) (refusal, bool) {
	if v >= MaxRaftValue {
		return refusal{kind: k, field: field, entry: -1, value: v}, false
	}
	return refusal{}, true
}

// refuse answers rpc with the refusal, counts it and logs it.
func (g *RaftGuard) refuse(rpc raft.RPC, r refusal) {
	g.drops[r.kind].Add(1)
	from := ""
	if h, ok := rpc.Command.(raft.WithRPCHeader); ok {
		hdr := h.GetRPCHeader()
		from = sender(string(hdr.ID), string(hdr.Addr))
	}
	g.logger.Warn("refused raft rpc", "kind", r.kind.String(), "field", r.fieldName(), "value", r.valueString(), "from", from)
	rpc.Respond(nil, r.err())
}

// refuseAnswer counts and logs an answer to this node's request whose term
// is out of bounds, and returns the error for the caller.
func (g *RaftGuard) refuseAnswer(k raftKind, id raft.ServerID, target raft.ServerAddress, term uint64) error {
	g.drops[k].Add(1)
	r := refusal{kind: k, field: "Term", entry: -1, value: term}
	g.logger.Warn("refused raft rpc", "kind", k.String(), "field", r.fieldName(), "value", r.valueString(), "from", sender(string(id), string(target)))
	return r.err()
}

// sender names a peer as id@addr for a log, bounded and printable: the
// header is whatever the peer chose to send.
func sender(id, addr string) string {
	id, addr = printable(id), printable(addr)
	switch {
	case id == "":
		return addr
	case addr == "":
		return id
	default:
		return id + "@" + addr
	}
}

func printable(s string) string {
	if len(s) > maxFromLen {
		s = s[:maxFromLen]
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, s)
}
