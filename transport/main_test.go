package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// hangGuard bounds waits that should end on their own, so a regression fails
// the test with a message instead of hanging it. It is never what a test
// waits for.
const hangGuard = time.Minute

// waitFor polls cond until it holds. The bound only turns a hang into a
// failure; nothing is timed by it.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	bound := time.NewTimer(hangGuard)
	defer bound.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-bound.C:
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// recv takes one value from ch, failing the test on a hang.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	bound := time.NewTimer(hangGuard)
	defer bound.Stop()
	select {
	case v := <-ch:
		return v
	case <-bound.C:
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// testLogger is silent unless TRANSPORT_TEST_LOG names a level ("debug").
func testLogger(name string) hclog.Logger {
	level := hclog.LevelFromString(os.Getenv("TRANSPORT_TEST_LOG"))
	if level == hclog.NoLevel {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: os.Stderr})
}

// newTestMux starts a Mux on a fresh loopback port; cleanup closes it and
// checks that Serve returned nil.
func newTestMux(t *testing.T, cfg MuxConfig) *Mux {
	t.Helper()
	if cfg.Listener == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listener = ln
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t.Name())
	}
	m, err := NewMux(cfg)
	if err != nil {
		cfg.Listener.Close()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- m.Serve() }()
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Mux.Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Mux.Serve after Close: %v", err)
		}
	})
	return m
}

// newTestRPCServer serves the Mux's RPC half with an "echo" method.
func newTestRPCServer(t *testing.T, m *Mux) *RPCServer {
	t.Helper()
	s := NewRPCServer(testLogger(t.Name()))
	s.Handle("echo", func(_ context.Context, body json.RawMessage) (any, error) {
		return body, nil
	})
	served := make(chan error, 1)
	go func() { served <- s.Serve(m.RPCListener()) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("RPCServer.Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("RPCServer.Serve after Close: %v", err)
		}
	})
	return s
}

type echoMsg struct {
	Text string `json:"text"`
	N    int    `json:"n"`
}

// callEcho makes one echo call from client to addr and checks the answer.
func callEcho(t *testing.T, c *RPCClient, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	want := echoMsg{Text: "hello", N: 42}
	var got echoMsg
	if err := c.Call(ctx, addr, "echo", want, &got); err != nil {
		t.Fatalf("echo to %s: %v", addr, err)
	}
	if got != want {
		t.Fatalf("echo to %s = %+v, want %+v", addr, got, want)
	}
}

// newRaftTransport runs raft's NetworkTransport over the Mux's stream layer
// and answers every AppendEntries and RequestVote it receives. Entries'
// data is reported on the returned channel.
func newRaftTransport(t *testing.T, m *Mux) (*raft.NetworkTransport, <-chan []byte) {
	t.Helper()
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  m.RaftLayer(),
		MaxPool: 2,
		Timeout: hangGuard,
		Logger:  testLogger(t.Name() + "/raft-net"),
	})
	received := make(chan []byte, 16)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case rpc := <-tr.Consumer():
				switch req := rpc.Command.(type) {
				case *raft.AppendEntriesRequest:
					for _, e := range req.Entries {
						received <- e.Data
					}
					rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, LastLog: req.PrevLogEntry + uint64(len(req.Entries)), Success: true}, nil)
				case *raft.RequestVoteRequest:
					rpc.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: true}, nil)
				default:
					rpc.Respond(nil, errors.New("unexpected raft rpc"))
				}
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		// CloseStreams closes our pooled outbound conns, which ends the
		// peer's handler goroutines for them.
		tr.CloseStreams()
		tr.Close()
		close(done)
		wg.Wait()
	})
	return tr, received
}

// appendEntry sends one entry from `from` to the node at `to` and checks the
// reply and that the peer's consumer saw the data.
func appendEntry(from *raft.NetworkTransport, to raft.ServerAddress, received <-chan []byte, data string) error {
	req := &raft.AppendEntriesRequest{
		RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("from"), Addr: []byte(from.LocalAddr())},
		Term:         3,
		PrevLogEntry: 9,
		PrevLogTerm:  3,
		Entries:      []*raft.Log{{Index: 10, Term: 3, Type: raft.LogCommand, Data: []byte(data)}},
	}
	var resp raft.AppendEntriesResponse
	if err := from.AppendEntries("to", to, req, &resp); err != nil {
		return err
	}
	if !resp.Success || resp.Term != 3 || resp.LastLog != 10 {
		return errors.New("unexpected AppendEntries response")
	}
	select {
	case got := <-received:
		if string(got) != data {
			return errors.New("peer received other data: " + string(got))
		}
	default:
		// The peer answers only after reporting the data, so it is there.
		return errors.New("peer did not report the entry")
	}
	return nil
}

// requestVote sends a RequestVote and checks it was granted.
func requestVote(from *raft.NetworkTransport, to raft.ServerAddress) error {
	req := &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("from"), Addr: []byte(from.LocalAddr())},
		Term:      4,
	}
	var resp raft.RequestVoteResponse
	if err := from.RequestVote("to", to, req, &resp); err != nil {
		return err
	}
	if !resp.Granted || resp.Term != 4 {
		return errors.New("vote not granted")
	}
	return nil
}
