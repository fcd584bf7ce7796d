package transport

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// scriptedListener answers each Accept with the next of its script, then
// reports itself closed.
type scriptedListener struct {
	script []acceptResult
}

type acceptResult struct {
	conn net.Conn
	err  error
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	if len(l.script) == 0 {
		return nil, net.ErrClosed
	}
	r := l.script[0]
	l.script = l.script[1:]
	return r.conn, r.err
}

func (l *scriptedListener) Close() error   { return nil }
func (l *scriptedListener) Addr() net.Addr { return advertiseAddr("127.0.0.1:1") }

// fakeAcceptor admits conns until closed says otherwise.
type fakeAcceptor struct {
	mu      sync.Mutex
	closed  bool
	tracked int
}

func (a *fakeAcceptor) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

func (a *fakeAcceptor) track(net.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.tracked++
	return true
}

// A failing Accept (out of file descriptors, say) is retried, not fatal;
// each accepted conn is admitted and served; a listener closed by someone
// other than the server ends the loop with an error naming it.
func TestAcceptLoopRetriesThenReportsTheListenerClosed(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	c1, p1 := net.Pipe()
	c2, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	ln := &scriptedListener{script: []acceptResult{{err: emfile}, {conn: c1}, {err: emfile}, {err: emfile}, {conn: c2}}}
	srv := &fakeAcceptor{}
	served := make(chan net.Conn, 2)
	err := acceptLoop(context.Background(), ln, srv, hclog.NewNullLogger(), "test", func(c net.Conn) { served <- c })
	if !errors.Is(err, net.ErrClosed) || !strings.Contains(err.Error(), "test listener") {
		t.Fatalf("acceptLoop = %v, want net.ErrClosed naming the test listener", err)
	}
	if got := []net.Conn{recv(t, "the first conn served", served), recv(t, "the second conn served", served)}; !(got[0] == c1 && got[1] == c2 || got[0] == c2 && got[1] == c1) {
		t.Fatalf("served %v, want both conns", got)
	}
	if srv.tracked != 2 {
		t.Fatalf("tracked %d conns, want 2", srv.tracked)
	}
}

// Once the server is closed, a failing Accept ends the loop without error,
// and a conn accepted in the race with Close is closed, not served.
func TestAcceptLoopEndsWithItsServer(t *testing.T) {
	srv := &fakeAcceptor{closed: true}
	ln := &scriptedListener{script: []acceptResult{{err: syscall.EMFILE}}}
	if err := acceptLoop(context.Background(), ln, srv, hclog.NewNullLogger(), "test", nil); err != nil {
		t.Fatalf("acceptLoop after Close = %v, want nil", err)
	}

	c, p := net.Pipe()
	defer p.Close()
	ln = &scriptedListener{script: []acceptResult{{conn: c}}}
	served := false
	if err := acceptLoop(context.Background(), ln, srv, hclog.NewNullLogger(), "test", func(net.Conn) { served = true }); err != nil || served {
		t.Fatalf("acceptLoop with a refused conn = %v (served %v), want nil, not served", err, served)
	}
	if _, err := p.Write([]byte{1}); err == nil {
		t.Fatal("the refused conn was left open")
	}

	// The context ends a backoff: a loop whose Accept keeps failing stops.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ln = &scriptedListener{script: []acceptResult{{err: syscall.EMFILE}}}
	if err := acceptLoop(ctx, ln, &fakeAcceptor{}, hclog.NewNullLogger(), "test", nil); err != nil {
		t.Fatalf("acceptLoop with an ended context = %v, want nil", err)
	}
}

// Both servers accept through the loop: each reports its own listener
// closed under it.
func TestServeReportsItsListenerClosedUnderIt(t *testing.T) {
	muxLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMux(MuxConfig{Listener: muxLn})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewRPCServer(nil)
	defer s.Close()

	muxDone, rpcDone := make(chan error, 1), make(chan error, 1)
	go func() { muxDone <- m.Serve() }()
	go func() { rpcDone <- s.Serve(rpcLn) }()
	muxLn.Close()
	rpcLn.Close()
	for name, done := range map[string]chan error{"mux": muxDone, "rpc": rpcDone} {
		err := recv(t, name+" Serve to return", done)
		if !errors.Is(err, net.ErrClosed) || !strings.Contains(err.Error(), name+" listener") {
			t.Fatalf("%s Serve = %v, want net.ErrClosed naming the %s listener", name, err, name)
		}
	}
}
