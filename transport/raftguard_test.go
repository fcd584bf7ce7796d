package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// fieldCase sets one term or index field of a command to v.
type fieldCase struct {
	field string // as the refusal names it
	set   func(cmd any, v uint64)
}

// fullCommands returns one command of every type raft sends, with every
// term and index field at v.
func fullCommands(v uint64) []any {
	return []any{
		&raft.AppendEntriesRequest{Term: v, PrevLogEntry: v, PrevLogTerm: v, LeaderCommitIndex: v,
			Entries: []*raft.Log{{Index: v, Term: v}, {Index: v, Term: v}}},
		&raft.RequestVoteRequest{Term: v, LastLogIndex: v, LastLogTerm: v},
		&raft.RequestPreVoteRequest{Term: v, LastLogIndex: v, LastLogTerm: v},
		&raft.InstallSnapshotRequest{Term: v, LastLogIndex: v, LastLogTerm: v, ConfigurationIndex: v},
		&raft.TimeoutNowRequest{},
	}
}

// fieldCases lists every term and index field the guard checks, by type.
var fieldCases = map[string][]fieldCase{
	"AppendEntries": {
		{"Term", func(c any, v uint64) { c.(*raft.AppendEntriesRequest).Term = v }},
		{"PrevLogEntry", func(c any, v uint64) { c.(*raft.AppendEntriesRequest).PrevLogEntry = v }},
		{"PrevLogTerm", func(c any, v uint64) { c.(*raft.AppendEntriesRequest).PrevLogTerm = v }},
		{"LeaderCommitIndex", func(c any, v uint64) { c.(*raft.AppendEntriesRequest).LeaderCommitIndex = v }},
		{"Entries[1].Index", func(c any, v uint64) { c.(*raft.AppendEntriesRequest).Entries[1].Index = v }},
		{"Entries[1].Term", func(c any, v uint64) { c.(*raft.AppendEntriesRequest).Entries[1].Term = v }},
	},
	"RequestVote": {
		{"Term", func(c any, v uint64) { c.(*raft.RequestVoteRequest).Term = v }},
		{"LastLogIndex", func(c any, v uint64) { c.(*raft.RequestVoteRequest).LastLogIndex = v }},
		{"LastLogTerm", func(c any, v uint64) { c.(*raft.RequestVoteRequest).LastLogTerm = v }},
	},
	"RequestPreVote": {
		{"Term", func(c any, v uint64) { c.(*raft.RequestPreVoteRequest).Term = v }},
		{"LastLogIndex", func(c any, v uint64) { c.(*raft.RequestPreVoteRequest).LastLogIndex = v }},
		{"LastLogTerm", func(c any, v uint64) { c.(*raft.RequestPreVoteRequest).LastLogTerm = v }},
	},
	"InstallSnapshot": {
		{"Term", func(c any, v uint64) { c.(*raft.InstallSnapshotRequest).Term = v }},
		{"LastLogIndex", func(c any, v uint64) { c.(*raft.InstallSnapshotRequest).LastLogIndex = v }},
		{"LastLogTerm", func(c any, v uint64) { c.(*raft.InstallSnapshotRequest).LastLogTerm = v }},
		{"ConfigurationIndex", func(c any, v uint64) { c.(*raft.InstallSnapshotRequest).ConfigurationIndex = v }},
	},
}

func kindOf(cmd any) string {
	return strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", cmd), "*raft."), "Request")
}

// Every term and index field is refused at MaxRaftValue and above and
// passes just below it, with an error that names the field and the value.
func TestCheckRaftCommand_Bounds(t *testing.T) {
	for _, cmd := range fullCommands(MaxRaftValue - 1) {
		if r, ok := checkRaftCommand(cmd); !ok {
			t.Errorf("%s with every field at MaxRaftValue-1 refused: %v", kindOf(cmd), r.err())
		}
	}
	for i := range fullCommands(0) {
		kind := kindOf(fullCommands(0)[i])
		for _, fc := range fieldCases[kind] {
			for _, v := range []uint64{MaxRaftValue, math.MaxUint64} {
				cmd := fullCommands(0)[i]
				fc.set(cmd, v)
				r, ok := checkRaftCommand(cmd)
				if ok {
					t.Errorf("%s %s = %d passed", kind, fc.field, v)
					continue
				}
				err := r.err()
				want := fmt.Sprintf("%s %s = %d", kind, fc.field, v)
				if !errors.Is(err, ErrRaftRPCRefused) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s %s = %d: error %q, want ErrRaftRPCRefused naming %q", kind, fc.field, v, err, want)
				}
				// Raft treats a pre-vote error containing these words as a
				// grant.
				if strings.Contains(err.Error(), "unexpected command") {
					t.Errorf("error %q reads as raft's unsupported-pre-vote error", err)
				}
				if r.kind.String() != kind || r.fieldName() != fc.field || r.valueString() != fmt.Sprint(v) {
					t.Errorf("%s %s = %d: refusal names kind %s field %s value %s", kind, fc.field, v, r.kind, r.fieldName(), r.valueString())
				}
			}
		}
	}
}

func TestCheckRaftCommand_NilEntryAndUnknownTypes(t *testing.T) {
	ae := &raft.AppendEntriesRequest{Term: 1, Entries: []*raft.Log{{Index: 1, Term: 1}, nil}}
	r, ok := checkRaftCommand(ae)
	if ok || !strings.Contains(r.err().Error(), "AppendEntries Entries[1] is nil") {
		t.Errorf("nil entry: ok=%v, error %v", ok, r.err())
	}
	for _, cmd := range []any{nil, &raft.AppendEntriesResponse{}, raft.AppendEntriesRequest{}, "hello"} {
		r, ok := checkRaftCommand(cmd)
		if ok || r.kind != kindUnknown || !errors.Is(r.err(), ErrRaftRPCRefused) {
			t.Errorf("%T: ok=%v kind=%v error %v, want an unknown-type refusal", cmd, ok, r.kind, r.err())
			continue
		}
		if want := fmt.Sprintf("%T", cmd); r.valueString() != want {
			t.Errorf("%T named as %q", cmd, r.valueString())
		}
	}
}

// The check costs no allocation on an RPC that passes.
func TestCheckRaftCommand_NoAllocation(t *testing.T) {
	cmds := fullCommands(7)
	allocs := testing.AllocsPerRun(100, func() {
		for _, c := range cmds {
			if _, ok := checkRaftCommand(c); !ok {
				panic("refused")
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per check, want 0", allocs)
	}
}

// reached is an RPC that got past the guard, and which way it came.
type reached struct {
	via string // "consumer" or "heartbeat"
	cmd any
}

// serveRaft answers every RPC from consumer with answer until the test
// ends.
func serveRaft(t *testing.T, consumer <-chan raft.RPC, answer func(raft.RPC)) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case rpc := <-consumer:
				answer(rpc)
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		wg.Wait()
	})
}

// answerInKind grants everything and echoes the request's term, as a
// healthy peer of the same term would.
func answerInKind(rpc raft.RPC) {
	switch req := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		last := req.PrevLogEntry
		if n := len(req.Entries); n > 0 {
			last = req.Entries[n-1].Index
		}
		rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, LastLog: last, Success: true}, nil)
	case *raft.RequestVoteRequest:
		rpc.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: true}, nil)
	case *raft.RequestPreVoteRequest:
		rpc.Respond(&raft.RequestPreVoteResponse{Term: req.Term, Granted: true}, nil)
	case *raft.InstallSnapshotRequest:
		_, err := io.Copy(io.Discard, rpc.Reader)
		rpc.Respond(&raft.InstallSnapshotResponse{Term: req.Term, Success: err == nil}, err)
	case *raft.TimeoutNowRequest:
		rpc.Respond(&raft.TimeoutNowResponse{}, nil)
	default:
		rpc.Respond(nil, errors.New("unexpected raft rpc"))
	}
}

// newNetTransport runs a NetworkTransport over m; cleanup closes it.
func newNetTransport(t *testing.T, m *Mux, name string) *raft.NetworkTransport {
	t.Helper()
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  m.RaftLayer(),
		MaxPool: 2,
		Timeout: 5 * time.Second,
		Logger:  testLogger(t.Name() + "/" + name),
	})
	t.Cleanup(func() {
		tr.CloseStreams()
		tr.Close()
	})
	return tr
}

// newGuardedPeer runs a guarded NetworkTransport over a fresh Mux that
// answers in kind and reports every RPC that got past the guard, before
// answering it.
func newGuardedPeer(t *testing.T) (*RaftGuard, <-chan reached) {
	t.Helper()
	g, err := GuardRaft(newNetTransport(t, newTestMux(t, MuxConfig{}), "guarded"), testLogger(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("RaftGuard.Close: %v", err)
		}
	})
	got := make(chan reached, 16)
	g.SetHeartbeatHandler(func(rpc raft.RPC) {
		got <- reached{"heartbeat", rpc.Command}
		answerInKind(rpc)
	})
	serveRaft(t, g.Consumer(), func(rpc raft.RPC) {
		got <- reached{"consumer", rpc.Command}
		answerInKind(rpc)
	})
	return g, got
}

// noneReached fails the test if an RPC got past the guard. A peer reports
// an RPC before answering it, so once the sender has its answer, whatever
// got through is already reported.
func noneReached(t *testing.T, got <-chan reached, what string) {
	t.Helper()
	select {
	case r := <-got:
		t.Fatalf("%s: %s %T reached raft", what, r.via, r.cmd)
	default:
	}
}

func header(from raft.Transport) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("sender"), Addr: []byte(from.LocalAddr())}
}

// Over real NetworkTransports: of each kind, an RPC out of bounds is
// answered with an error naming the field, never reaches raft and is
// counted; one in bounds reaches raft the way raft's transport sends it
// and its answer comes back.
func TestRaftGuard_RefusesOutOfBoundsRPCs(t *testing.T) {
	g, got := newGuardedPeer(t)
	from := newNetTransport(t, newTestMux(t, MuxConfig{}), "sender")
	to := g.LocalAddr()
	huge := uint64(math.MaxUint64)
	var snapSent []byte

	cases := []struct {
		name  string
		via   string // the way the good RPC reaches raft
		send  func(bad bool) error
		field string
		drops func(RaftDrops) uint64
	}{
		{
			name: "AppendEntries", via: "consumer", field: "AppendEntries Term = 18446744073709551615",
			drops: func(d RaftDrops) uint64 { return d.AppendEntries },
			send: func(bad bool) error {
				req := &raft.AppendEntriesRequest{RPCHeader: header(from), Term: 3, PrevLogEntry: 9, PrevLogTerm: 3, LeaderCommitIndex: 9,
					Entries: []*raft.Log{{Index: 10, Term: 3, Type: raft.LogCommand, Data: []byte("x")}}}
				if bad {
					req.Term = huge
				}
				var resp raft.AppendEntriesResponse
				if err := from.AppendEntries("g", to, req, &resp); err != nil {
					return err
				}
				if !resp.Success || resp.Term != 3 || resp.LastLog != 10 {
					return fmt.Errorf("answer %+v", resp)
				}
				return nil
			},
		},
		{
			name: "AppendEntries entry", via: "consumer", field: "AppendEntries Entries[1].Term = 4611686018427387904",
			drops: func(d RaftDrops) uint64 { return d.AppendEntries },
			send: func(bad bool) error {
				req := &raft.AppendEntriesRequest{RPCHeader: header(from), Term: 3, PrevLogEntry: 9, PrevLogTerm: 3,
					Entries: []*raft.Log{{Index: 10, Term: 3}, {Index: 11, Term: 3}}}
				if bad {
					req.Entries[1].Term = MaxRaftValue
				}
				var resp raft.AppendEntriesResponse
				return from.AppendEntries("g", to, req, &resp)
			},
		},
		{
			// The wire format carries a nil entry; raft would dereference it.
			name: "AppendEntries nil entry", via: "consumer", field: "AppendEntries Entries[0] is nil",
			drops: func(d RaftDrops) uint64 { return d.AppendEntries },
			send: func(bad bool) error {
				req := &raft.AppendEntriesRequest{RPCHeader: header(from), Term: 3, PrevLogEntry: 9, PrevLogTerm: 3,
					Entries: []*raft.Log{{Index: 10, Term: 3}}}
				if bad {
					req.Entries[0] = nil
				}
				var resp raft.AppendEntriesResponse
				return from.AppendEntries("g", to, req, &resp)
			},
		},
		{
			// The attack: heartbeat-shaped, so NetworkTransport hands it
			// to the heartbeat handler, not to Consumer.
			name: "Heartbeat", via: "heartbeat", field: "Heartbeat Term = 18446744073709551615",
			drops: func(d RaftDrops) uint64 { return d.Heartbeat },
			send: func(bad bool) error {
				req := &raft.AppendEntriesRequest{RPCHeader: header(from), Term: 3}
				if bad {
					req.Term = huge
				}
				var resp raft.AppendEntriesResponse
				if err := from.AppendEntries("g", to, req, &resp); err != nil {
					return err
				}
				if !resp.Success || resp.Term != 3 {
					return fmt.Errorf("answer %+v", resp)
				}
				return nil
			},
		},
		{
			name: "RequestVote", via: "consumer", field: "RequestVote LastLogIndex = 4611686018427387904",
			drops: func(d RaftDrops) uint64 { return d.RequestVote },
			send: func(bad bool) error {
				req := &raft.RequestVoteRequest{RPCHeader: header(from), Term: 4, LastLogIndex: 10, LastLogTerm: 3}
				if bad {
					req.LastLogIndex = MaxRaftValue
				}
				var resp raft.RequestVoteResponse
				if err := from.RequestVote("g", to, req, &resp); err != nil {
					return err
				}
				if !resp.Granted || resp.Term != 4 {
					return fmt.Errorf("answer %+v", resp)
				}
				return nil
			},
		},
		{
			name: "RequestPreVote", via: "consumer", field: "RequestPreVote Term = 18446744073709551615",
			drops: func(d RaftDrops) uint64 { return d.RequestPreVote },
			send: func(bad bool) error {
				req := &raft.RequestPreVoteRequest{RPCHeader: header(from), Term: 4, LastLogIndex: 10, LastLogTerm: 3}
				if bad {
					req.Term = huge
				}
				var resp raft.RequestPreVoteResponse
				if err := from.RequestPreVote("g", to, req, &resp); err != nil {
					return err
				}
				if !resp.Granted || resp.Term != 4 {
					return fmt.Errorf("answer %+v", resp)
				}
				return nil
			},
		},
		{
			// No data: a refused snapshot's data is not read, see the next
			// test.
			name: "InstallSnapshot", via: "consumer", field: "InstallSnapshot ConfigurationIndex = 18446744073709551615",
			drops: func(d RaftDrops) uint64 { return d.InstallSnapshot },
			send: func(bad bool) error {
				req := &raft.InstallSnapshotRequest{RPCHeader: header(from), SnapshotVersion: raft.SnapshotVersionMax,
					Term: 3, LastLogIndex: 20, LastLogTerm: 3, ConfigurationIndex: 1}
				if bad {
					req.ConfigurationIndex = huge
				} else {
					snapSent = []byte("snapshot")
					req.Size = int64(len(snapSent))
				}
				var resp raft.InstallSnapshotResponse
				if err := from.InstallSnapshot("g", to, req, &resp, bytes.NewReader(snapSent)); err != nil {
					return err
				}
				if !resp.Success || resp.Term != 3 {
					return fmt.Errorf("answer %+v", resp)
				}
				return nil
			},
		},
	}
	var total uint64
	for _, tc := range cases {
		// In bounds: through, answered.
		if err := tc.send(false); err != nil {
			t.Fatalf("%s in bounds: %v", tc.name, err)
		}
		r := recv(t, tc.name+" in bounds reaching raft", got)
		want := strings.Fields(tc.name)[0]
		if tc.via == "heartbeat" {
			want = "AppendEntries"
		}
		if r.via != tc.via || kindOf(r.cmd) != want {
			t.Fatalf("%s in bounds reached raft as %s %T, want %s", tc.name, r.via, r.cmd, tc.via)
		}
		before := tc.drops(g.Drops())

		// Out of bounds: refused, counted, not through.
		err := tc.send(true)
		if err == nil || !strings.Contains(err.Error(), "raft rpc refused: "+tc.field) {
			t.Fatalf("%s out of bounds: error %v, want a refusal naming %q", tc.name, err, tc.field)
		}
		noneReached(t, got, tc.name+" out of bounds")
		if n := tc.drops(g.Drops()); n != before+1 {
			t.Fatalf("%s out of bounds: counted %d, want %d", tc.name, n, before+1)
		}
		total++
		if n := g.Dropped(); n != total {
			t.Fatalf("Dropped = %d after %d refusals", n, total)
		}
	}

	// TimeoutNow carries no term or index: it always passes.
	var resp raft.TimeoutNowResponse
	if err := from.TimeoutNow("g", to, &raft.TimeoutNowRequest{RPCHeader: header(from)}, &resp); err != nil {
		t.Fatalf("TimeoutNow: %v", err)
	}
	if r := recv(t, "TimeoutNow reaching raft", got); r.via != "consumer" || kindOf(r.cmd) != "TimeoutNow" {
		t.Fatalf("TimeoutNow reached raft as %s %T", r.via, r.cmd)
	}
	if g.Dropped() != total {
		t.Fatalf("Dropped = %d after %d refusals", g.Dropped(), total)
	}
}

// A refused snapshot's data is left unread: the sender gets an error (the
// refusal, or its connection cut when the transport reads the data as the
// next request), nothing reaches raft, and the next connection works.
func TestRaftGuard_RefusedSnapshotWithData(t *testing.T) {
	g, got := newGuardedPeer(t)
	from := newNetTransport(t, newTestMux(t, MuxConfig{}), "sender")
	data := bytes.Repeat([]byte("snapshot"), 1024)
	req := &raft.InstallSnapshotRequest{RPCHeader: header(from), SnapshotVersion: raft.SnapshotVersionMax,
		Term: math.MaxUint64, LastLogIndex: 20, LastLogTerm: 3, Size: int64(len(data))}
	var resp raft.InstallSnapshotResponse
	if err := from.InstallSnapshot("g", g.LocalAddr(), req, &resp, bytes.NewReader(data)); err == nil {
		t.Fatal("InstallSnapshot out of bounds succeeded")
	}
	noneReached(t, got, "InstallSnapshot out of bounds")
	if d := g.Drops(); d.InstallSnapshot != 1 || d.Total() != 1 {
		t.Fatalf("drops %+v, want one InstallSnapshot", d)
	}

	req.Term = 3
	if err := from.InstallSnapshot("g", g.LocalAddr(), req, &resp, bytes.NewReader(data)); err != nil || !resp.Success {
		t.Fatalf("InstallSnapshot in bounds after a refusal: %v, answer %+v", err, resp)
	}
	recv(t, "InstallSnapshot in bounds reaching raft", got)
}

// Raft adopts a newer term from the answers to its own vote and pre-vote
// requests: the guard refuses an answer whose term is out of bounds.
func TestRaftGuard_RefusesOutOfBoundsVoteAnswers(t *testing.T) {
	g, err := GuardRaft(newNetTransport(t, newTestMux(t, MuxConfig{}), "guarded"), testLogger(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	peer := newNetTransport(t, newTestMux(t, MuxConfig{}), "peer")
	var lie atomic.Bool
	serveRaft(t, peer.Consumer(), func(rpc raft.RPC) {
		if !lie.Load() {
			answerInKind(rpc)
			return
		}
		switch rpc.Command.(type) {
		case *raft.RequestVoteRequest:
			rpc.Respond(&raft.RequestVoteResponse{Term: math.MaxUint64, Granted: true}, nil)
		case *raft.RequestPreVoteRequest:
			rpc.Respond(&raft.RequestPreVoteResponse{Term: math.MaxUint64, Granted: true}, nil)
		default:
			answerInKind(rpc)
		}
	})
	to := peer.LocalAddr()
	vote := func() (raft.RequestVoteResponse, error) {
		var resp raft.RequestVoteResponse
		err := g.RequestVote("peer", to, &raft.RequestVoteRequest{RPCHeader: header(g), Term: 5}, &resp)
		return resp, err
	}
	preVote := func() (raft.RequestPreVoteResponse, error) {
		var resp raft.RequestPreVoteResponse
		err := g.RequestPreVote("peer", to, &raft.RequestPreVoteRequest{RPCHeader: header(g), Term: 5}, &resp)
		return resp, err
	}

	if resp, err := vote(); err != nil || !resp.Granted || resp.Term != 5 {
		t.Fatalf("honest vote: %+v, %v", resp, err)
	}
	if resp, err := preVote(); err != nil || !resp.Granted || resp.Term != 5 {
		t.Fatalf("honest pre-vote: %+v, %v", resp, err)
	}

	lie.Store(true)
	resp, err := vote()
	if !errors.Is(err, ErrRaftRPCRefused) || !strings.Contains(err.Error(), "RequestVoteResponse Term = 18446744073709551615") {
		t.Fatalf("lying vote: error %v", err)
	}
	if resp.Term != 0 || resp.Granted {
		t.Fatalf("lying vote left the answer %+v, want it cleared", resp)
	}
	preResp, err := preVote()
	if !errors.Is(err, ErrRaftRPCRefused) || !strings.Contains(err.Error(), "RequestPreVoteResponse Term = 18446744073709551615") {
		t.Fatalf("lying pre-vote: error %v", err)
	}
	if preResp.Term != 0 || preResp.Granted {
		t.Fatalf("lying pre-vote left the answer %+v, want it cleared", preResp)
	}
	if d := g.Drops(); d != (RaftDrops{RequestVoteResponse: 1, RequestPreVoteResponse: 1}) {
		t.Fatalf("drops %+v", d)
	}
}

// fakeInner is a raft.Transport whose inbound RPCs the test queues by
// hand. Outbound methods are not implemented.
type fakeInner struct {
	raft.Transport
	ch     chan raft.RPC
	closed atomic.Int32

	mu sync.Mutex
	hb func(raft.RPC)
}

func newFakeInner(queue int) *fakeInner { return &fakeInner{ch: make(chan raft.RPC, queue)} }

func (f *fakeInner) Consumer() <-chan raft.RPC { return f.ch }
func (f *fakeInner) Close() error {
	f.closed.Add(1)
	return errors.New("fake close")
}
func (f *fakeInner) RequestPreVote(raft.ServerID, raft.ServerAddress, *raft.RequestPreVoteRequest, *raft.RequestPreVoteResponse) error {
	return errors.New("not implemented")
}
func (f *fakeInner) SetHeartbeatHandler(cb func(raft.RPC)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hb = cb
}
func (f *fakeInner) heartbeatHandler() func(raft.RPC) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hb
}

// rpcWithAnswer is an RPC and the channel its answer arrives on.
func rpcWithAnswer(cmd any) (raft.RPC, <-chan raft.RPCResponse) {
	ch := make(chan raft.RPCResponse, 1)
	return raft.RPC{Command: cmd, RespChan: ch}, ch
}

func TestGuardRaft_RefusesTransportsItCannotStandFor(t *testing.T) {
	type noPreVote struct{ raft.Transport }
	if _, err := GuardRaft(noPreVote{newFakeInner(0)}, nil); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "WithPreVote") {
		t.Fatalf("transport without pre-vote: %v", err)
	}
	if _, err := GuardRaft(nil, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil transport: %v", err)
	}
}

// A command type raft never sends is refused and counted; the guard keeps
// forwarding after it.
func TestRaftGuard_RefusesUnknownCommand(t *testing.T) {
	inner := newFakeInner(0)
	g, err := GuardRaft(inner, testLogger(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	rpc, answer := rpcWithAnswer(&raft.AppendEntriesResponse{Term: 1})
	inner.ch <- rpc
	resp := recv(t, "the answer to an unknown command", answer)
	if !errors.Is(resp.Error, ErrRaftRPCRefused) || !strings.Contains(resp.Error.Error(), "unknown command type *raft.AppendEntriesResponse") {
		t.Fatalf("unknown command answered %+v", resp)
	}
	if d := g.Drops(); d != (RaftDrops{Unknown: 1}) {
		t.Fatalf("drops %+v", d)
	}

	rpc, _ = rpcWithAnswer(&raft.RequestVoteRequest{Term: 2})
	inner.ch <- rpc
	if got := recv(t, "a vote request after the refusal", g.Consumer()); got.Command != rpc.Command {
		t.Fatalf("Consumer gave %#v", got.Command)
	}
}

// Close answers every RPC the guard or inner still holds with
// ErrTransportShutdown before it returns, closes inner once and reports
// its error once.
func TestRaftGuard_CloseAnswersPendingRPCs(t *testing.T) {
	inner := newFakeInner(4)
	g, err := GuardRaft(inner, testLogger(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reads Consumer: the guard holds one, inner queues the rest.
	var answers []<-chan raft.RPCResponse
	for i := range 3 {
		rpc, answer := rpcWithAnswer(&raft.AppendEntriesRequest{Term: uint64(i + 1)})
		inner.ch <- rpc
		answers = append(answers, answer)
	}
	if err := g.Close(); err == nil || err.Error() != "fake close" {
		t.Fatalf("Close = %v, want inner's error", err)
	}
	for i, answer := range answers {
		select {
		case resp := <-answer:
			if !errors.Is(resp.Error, raft.ErrTransportShutdown) {
				t.Errorf("RPC %d answered %+v, want ErrTransportShutdown", i, resp)
			}
		default:
			t.Errorf("RPC %d unanswered after Close", i)
		}
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if n := inner.closed.Load(); n != 1 {
		t.Fatalf("inner closed %d times", n)
	}
	if d := g.Dropped(); d != 0 {
		t.Fatalf("shutdown answers counted as %d drops", d)
	}
}

func TestRaftGuard_HeartbeatHandler(t *testing.T) {
	inner := newFakeInner(0)
	g, err := GuardRaft(inner, testLogger(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	var calls atomic.Int32
	g.SetHeartbeatHandler(func(rpc raft.RPC) {
		calls.Add(1)
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})
	hb := inner.heartbeatHandler()
	if hb == nil {
		t.Fatal("no heartbeat handler installed in inner")
	}
	rpc, answer := rpcWithAnswer(&raft.AppendEntriesRequest{Term: math.MaxUint64})
	hb(rpc)
	if resp := <-answer; !errors.Is(resp.Error, ErrRaftRPCRefused) || calls.Load() != 0 {
		t.Fatalf("bad heartbeat: answer %+v, handler called %d times", resp, calls.Load())
	}
	rpc, answer = rpcWithAnswer(&raft.AppendEntriesRequest{Term: 3})
	hb(rpc)
	if resp := <-answer; resp.Error != nil || calls.Load() != 1 {
		t.Fatalf("good heartbeat: answer %+v, handler called %d times", resp, calls.Load())
	}
	if d := g.Drops(); d != (RaftDrops{Heartbeat: 1}) {
		t.Fatalf("drops %+v", d)
	}

	g.SetHeartbeatHandler(nil)
	if inner.heartbeatHandler() != nil {
		t.Fatal("SetHeartbeatHandler(nil) left a handler in inner")
	}
}

// Raft's heartbeat handler runs on the transport's goroutines, which raft's
// Shutdown does not wait for: one still running after the node closed its
// stores wrote a term to a closed store (a panic in make test: "failed to
// save current term: closed"). Close waits for the heartbeats in flight and
// refuses later ones.
func TestRaftGuard_CloseWaitsForHeartbeats(t *testing.T) {
	inner := newFakeInner(0)
	g, err := GuardRaft(inner, testLogger(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	var left atomic.Bool // the first heartbeat left raft's handler
	g.SetHeartbeatHandler(func(rpc raft.RPC) {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
			defer left.Store(true)
		}
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})
	hb := inner.heartbeatHandler()
	rpc, answer := rpcWithAnswer(&raft.AppendEntriesRequest{Term: 3})
	go hb(rpc)
	<-entered

	// Whether the heartbeat had left the handler when Close returned: the
	// handler is held until after the checks below, so a Close that does
	// not wait for it returns while it is still in, whatever the timing.
	closedAfter := make(chan bool, 1)
	go func() {
		g.Close()
		closedAfter <- left.Load()
	}()
	waitFor(t, "Close to refuse new heartbeats", func() bool {
		g.hbMu.Lock()
		defer g.hbMu.Unlock()
		return g.hbClosed
	})
	late, lateAnswer := rpcWithAnswer(&raft.AppendEntriesRequest{Term: 3})
	hb(late)
	if resp := <-lateAnswer; !errors.Is(resp.Error, raft.ErrTransportShutdown) || calls.Load() != 1 {
		t.Fatalf("heartbeat after Close: answer %+v, handler called %d times", resp, calls.Load())
	}
	close(release)
	if resp := <-answer; resp.Error != nil {
		t.Fatalf("the heartbeat in flight: %+v", resp)
	}
	if !<-closedAfter {
		t.Fatal("Close returned while a heartbeat was in raft's handler")
	}
}

// A refusal is logged once at Warn with the field, the value and the
// sender, whose name is bounded and printable whatever the header holds.
func TestRaftGuard_LogsRefusal(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Output: lockedWriter{&mu, &buf}, JSONFormat: true, Level: hclog.Debug})
	inner := newFakeInner(0)
	g, err := GuardRaft(inner, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	hdr := raft.RPCHeader{ID: []byte("node\x1b[31m"), Addr: []byte(strings.Repeat("a", 1000))}
	rpc, answer := rpcWithAnswer(&raft.RequestVoteRequest{RPCHeader: hdr, Term: 5, LastLogTerm: math.MaxUint64})
	inner.ch <- rpc
	recv(t, "the refusal", answer)

	mu.Lock()
	line := buf.String()
	mu.Unlock()
	var entry map[string]any
	if err := json.Unmarshal([]byte(line), &entry); err != nil {
		t.Fatalf("one JSON log line expected, got %q: %v", line, err)
	}
	want := map[string]any{
		"@level": "warn", "@message": "refused raft rpc", "@module": "raft-guard",
		"kind": "RequestVote", "field": "LastLogTerm", "value": "18446744073709551615",
		"from": "node?[31m@" + strings.Repeat("a", maxFromLen),
	}
	for k, v := range want {
		if entry[k] != v {
			t.Errorf("log %s = %v, want %v", k, entry[k], v)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
