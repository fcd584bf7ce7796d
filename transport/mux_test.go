package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Raft and the RPC share one port: a real raft NetworkTransport pair
// replicates an entry and wins a vote while RPC calls reach the same address.
func TestMux_RaftAndRPCShareOnePort(t *testing.T) {
	a := newTestMux(t, MuxConfig{})
	b := newTestMux(t, MuxConfig{})
	newTestRPCServer(t, b)
	trA, _ := newRaftTransport(t, a)
	trB, receivedB := newRaftTransport(t, b)

	addrB := b.Addr().String()
	if got := trB.LocalAddr(); string(got) != addrB {
		t.Fatalf("raft LocalAddr = %q, want the advertise address %q", got, addrB)
	}

	// Interleave the protocols on the one port.
	callEcho(t, a.RPCClient(), addrB)
	if err := appendEntry(trA, raft.ServerAddress(addrB), receivedB, "entry-1"); err != nil {
		t.Fatalf("AppendEntries over the mux: %v", err)
	}
	callEcho(t, a.RPCClient(), addrB)
	if err := requestVote(trA, raft.ServerAddress(addrB)); err != nil {
		t.Fatalf("RequestVote over the mux: %v", err)
	}
	if err := appendEntry(trA, raft.ServerAddress(addrB), receivedB, "entry-2"); err != nil {
		t.Fatalf("second AppendEntries over the mux: %v", err)
	}
}

// A client that connects and sends nothing holds no one up: calls and Raft
// dials on the same port proceed while it sits in the handshake, and Close
// drops it.
func TestMux_SilentClientDoesNotBlockOthers(t *testing.T) {
	m := newTestMux(t, MuxConfig{HandshakeTimeout: time.Hour}) // only Close ends its wait
	server := newTestRPCServer(t, m)
	client := newTestMux(t, MuxConfig{})
	_, receivedM := newRaftTransport(t, m)
	trClient, _ := newRaftTransport(t, client)

	silent, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	// The kernel queues connections in order, so the silent one is accepted
	// before this call's connection is.
	callEcho(t, client.RPCClient(), m.Addr().String())
	if err := appendEntry(trClient, raft.ServerAddress(m.Addr().String()), receivedM, "past the silent client"); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	pending := len(m.pending)
	m.mu.Unlock()
	if pending != 1 {
		t.Fatalf("%d connections in handshake, want the silent one", pending)
	}

	// Shut down in the order a node does: the RPC server before its Mux.
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	expectClosedByPeer(t, silent)
}

// A silent client is dropped once HandshakeTimeout passes, Mux still open.
func TestMux_SilentClientDroppedAfterHandshakeTimeout(t *testing.T) {
	m := newTestMux(t, MuxConfig{HandshakeTimeout: 20 * time.Millisecond})
	newTestRPCServer(t, m)

	silent, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	expectClosedByPeer(t, silent)
	callEcho(t, m.RPCClient(), m.Addr().String())
}

// An unknown first byte gets the connection closed; the port keeps serving.
func TestMux_UnknownTypeByteClosesConn(t *testing.T) {
	m := newTestMux(t, MuxConfig{})
	newTestRPCServer(t, m)

	conn, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{0x7f}); err != nil {
		t.Fatal(err)
	}
	expectClosedByPeer(t, conn)
	callEcho(t, m.RPCClient(), m.Addr().String())
}

// raft closes its stream layer on shutdown; that must not take the RPC half
// down, and Raft conns arriving afterwards are refused.
func TestMux_RaftLayerCloseLeavesRPCRunning(t *testing.T) {
	m := newTestMux(t, MuxConfig{})
	newTestRPCServer(t, m)
	layer := m.RaftLayer()
	if err := layer.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := layer.Accept(); !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on closed raft layer = %v, want ErrClosed and net.ErrClosed", err)
	}

	conn, err := layer.Dial(raft.ServerAddress(m.Addr().String()), hangGuard)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	expectClosedByPeer(t, conn)
	callEcho(t, m.RPCClient(), m.Addr().String())
}

// Close stops Serve (it returns nil, checked by newTestMux's cleanup),
// closes both sub-listeners, refuses new dials, and is idempotent.
func TestMux_Close(t *testing.T) {
	m := newTestMux(t, MuxConfig{})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for name, ln := range map[string]net.Listener{"raft": m.RaftLayer(), "rpc": m.RPCListener()} {
		if _, err := ln.Accept(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s Accept after Close = %v, want ErrClosed", name, err)
		}
	}
	if _, err := m.RaftLayer().Dial("127.0.0.1:1", hangGuard); !errors.Is(err, ErrClosed) {
		t.Errorf("raft Dial after Close = %v, want ErrClosed", err)
	}
	if err := m.RPCClient().Call(context.Background(), "127.0.0.1:1", "echo", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Call after Close = %v, want ErrClosed", err)
	}
	// Serve on a closed Mux returns at once.
	if err := m.Serve(); err != nil {
		t.Errorf("Serve after Close = %v", err)
	}
}

// Both halves report the advertise address, not the bind address.
func TestMux_AdvertiseAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMux(t, MuxConfig{Listener: ln, Advertise: "node-1.example:7000"})
	for name, got := range map[string]net.Addr{"mux": m.Addr(), "raft": m.RaftLayer().Addr(), "rpc": m.RPCListener().Addr()} {
		if got.String() != "node-1.example:7000" || got.Network() != "tcp" {
			t.Errorf("%s Addr = %s/%s, want tcp/node-1.example:7000", name, got.Network(), got)
		}
	}
}

func TestNewMux_InvalidConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	anyIP, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer anyIP.Close()

	cases := map[string]MuxConfig{
		"no listener":              {},
		"negative timeout":         {Listener: ln, HandshakeTimeout: -time.Second},
		"unspecified bind address": {Listener: anyIP},
		"unspecified advertise":    {Listener: ln, Advertise: "[::]:7000"},
		"advertise without port":   {Listener: ln, Advertise: "node-1"},
		"advertise port zero":      {Listener: ln, Advertise: "node-1:0"},
		"server TLS without cert":  {Listener: ln, ServerTLS: &tls.Config{}},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := NewMux(cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("NewMux = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// errRefused is what the fault-injecting Dialer returns.
var errRefused = errors.New("refused by test dialer")

// A wrapping Dialer sees every outbound dial: refusing one address fails
// Raft dials and RPC calls to it with the Dialer's error, wrapped, while
// other addresses pass through.
func TestMux_DialerSeam(t *testing.T) {
	up := newTestMux(t, MuxConfig{})
	newTestRPCServer(t, up)
	down := newTestMux(t, MuxConfig{})
	newTestRPCServer(t, down)
	_, receivedUp := newRaftTransport(t, up)

	refuse := down.Addr().String()
	var d net.Dialer
	dialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == refuse {
			return nil, fmt.Errorf("partitioned from %s: %w", addr, errRefused)
		}
		return d.DialContext(ctx, network, addr)
	}
	m := newTestMux(t, MuxConfig{Dial: dialer})
	tr, _ := newRaftTransport(t, m)

	if _, err := m.RaftLayer().Dial(raft.ServerAddress(refuse), hangGuard); !errors.Is(err, errRefused) {
		t.Errorf("raft Dial to refused address = %v, want errRefused", err)
	}
	if err := appendEntry(tr, raft.ServerAddress(refuse), nil, "x"); !errors.Is(err, errRefused) {
		t.Errorf("AppendEntries to refused address = %v, want errRefused", err)
	}
	err := m.RPCClient().Call(context.Background(), refuse, "echo", nil, nil)
	var remote *RPCError
	if !errors.Is(err, errRefused) || errors.As(err, &remote) {
		t.Errorf("Call to refused address = %v, want a local error wrapping errRefused", err)
	}

	callEcho(t, m.RPCClient(), up.Addr().String())
	if err := appendEntry(tr, raft.ServerAddress(up.Addr().String()), receivedUp, "through"); err != nil {
		t.Errorf("AppendEntries through the dialer: %v", err)
	}
}

// expectClosedByPeer reads conn until the other end closes it. Running into
// the hang guard means the peer never did.
func expectClosedByPeer(t *testing.T, conn net.Conn) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(hangGuard)); err != nil {
		t.Fatal(err)
	}
	var b [64]byte
	for {
		_, err := conn.Read(b[:])
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("peer did not close the connection")
		}
		return
	}
}

// Close aborts a dial in progress, and the error says why.
func TestMux_CloseAbortsDialInProgress(t *testing.T) {
	entered := make(chan struct{})
	dialer := func(ctx context.Context, _, _ string) (net.Conn, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	m := newTestMux(t, MuxConfig{Dial: dialer})
	dialErr := make(chan error, 1)
	go func() {
		_, err := m.RaftLayer().Dial("127.0.0.1:1", 0) // no timeout: only Close ends it
		dialErr <- err
	}()
	<-entered
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-dialErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("Dial during Close = %v, want ErrClosed", err)
	}
}

// Raft never closes the streams it accepted; Mux.Close does, so a stopped
// node leaves no goroutine blocked reading them.
func TestMux_CloseClosesAcceptedConns(t *testing.T) {
	server := newTestMux(t, MuxConfig{})
	client := newTestMux(t, MuxConfig{})
	out, err := client.RaftLayer().Dial(raft.ServerAddress(server.Addr().String()), hangGuard)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	in, err := server.RaftLayer().Accept()
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := in.Read(make([]byte, 1))
		read <- err
	}()
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("read on an accepted conn succeeded after Close")
		}
	case <-time.After(hangGuard):
		t.Fatal("accepted conn still open after Mux.Close")
	}
}
