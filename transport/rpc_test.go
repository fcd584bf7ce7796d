package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// codedErr is a handler error that picks its wire code.
type codedErr struct {
	code    string
	details map[string]string
}

func (e *codedErr) Error() string                 { return "refused: " + e.code }
func (e *codedErr) RPCCode() string               { return e.code }
func (e *codedErr) RPCDetails() map[string]string { return e.details }

// rpcPair is a Mux with an RPCServer on it and a client Mux.
func rpcPair(t *testing.T) (server *RPCServer, addr string, client *RPCClient) {
	t.Helper()
	m := newTestMux(t, MuxConfig{})
	server = newTestRPCServer(t, m)
	return server, m.Addr().String(), newTestMux(t, MuxConfig{}).RPCClient()
}

func TestRPC_RoundTrip(t *testing.T) {
	server, addr, client := rpcPair(t)
	server.Handle("node_info", func(_ context.Context, body json.RawMessage) (any, error) {
		if string(body) != "null" {
			return nil, fmt.Errorf("want a null body, got %s", body)
		}
		return map[string]string{"id": "node-1"}, nil
	})
	server.Handle("ack", func(context.Context, json.RawMessage) (any, error) { return nil, nil })

	callEcho(t, client, addr)

	var info map[string]string
	if err := client.Call(context.Background(), addr, "node_info", nil, &info); err != nil {
		t.Fatal(err)
	}
	if info["id"] != "node-1" {
		t.Fatalf("node_info = %v", info)
	}
	// A nil resp discards the reply; a nil result arrives as null.
	if err := client.Call(context.Background(), addr, "ack", echoMsg{}, nil); err != nil {
		t.Fatal(err)
	}
	var ptr *echoMsg
	if err := client.Call(context.Background(), addr, "ack", nil, &ptr); err != nil || ptr != nil {
		t.Fatalf("ack = %v, %v; want nil, nil", ptr, err)
	}
}

// Handlers run concurrently, one per connection (exercised under -race).
func TestRPC_ConcurrentCalls(t *testing.T) {
	_, addr, client := rpcPair(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			want := echoMsg{Text: "concurrent", N: i}
			var got echoMsg
			if err := client.Call(context.Background(), addr, "echo", want, &got); err != nil {
				errs <- err
			} else if got != want {
				errs <- fmt.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A handler's coded error reaches the caller with its code, details and
// message, even when wrapped; an uncoded error arrives as "internal". A
// forwarded *RPCError keeps its code.
func TestRPC_RemoteErrors(t *testing.T) {
	server, addr, client := rpcPair(t)
	details := map[string]string{"leader": "10.0.0.2:7000"}
	server.Handle("join", func(context.Context, json.RawMessage) (any, error) {
		return nil, fmt.Errorf("join node-4: %w", &codedErr{code: "not_leader", details: details})
	})
	server.Handle("broken", func(context.Context, json.RawMessage) (any, error) {
		return nil, errors.New("disk on fire")
	})
	server.Handle("forward", func(ctx context.Context, _ json.RawMessage) (any, error) {
		return nil, client.Call(ctx, addr, "join", nil, nil)
	})

	cases := []struct {
		method, code, message string
		details               map[string]string
	}{
		{"join", "not_leader", "join node-4: refused: not_leader", details},
		{"broken", CodeInternal, "disk on fire", nil},
		{"forward", "not_leader", "remote error not_leader: join node-4: refused: not_leader", details},
		{"no_such_method", CodeUnknownMethod, `unknown method "no_such_method"`, nil},
	}
	for _, c := range cases {
		t.Run(c.method, func(t *testing.T) {
			err := client.Call(context.Background(), addr, c.method, nil, nil)
			var remote *RPCError
			if !errors.As(err, &remote) {
				t.Fatalf("Call = %v, want *RPCError", err)
			}
			if remote.Code != c.code || remote.Message != c.message || !maps.Equal(remote.Details, c.details) {
				t.Fatalf("got %+v, want code %q message %q details %v", remote, c.code, c.message, c.details)
			}
			if !strings.Contains(err.Error(), c.code) {
				t.Fatalf("Error() = %q does not name the code", err)
			}
		})
	}
}

func TestRPCServer_HandleTwicePanics(t *testing.T) {
	s := NewRPCServer(nil)
	defer s.Close()
	h := func(context.Context, json.RawMessage) (any, error) { return nil, nil }
	s.Handle("join", h)
	defer func() {
		if recover() == nil {
			t.Fatal("second Handle of the same method did not panic")
		}
	}()
	s.Handle("join", h)
}

// Frames over MaxFrameSize are refused at each end: the client will not
// send one, the server drops a conn that announces one, and a reply too
// large to send becomes an "internal" error.
func TestRPC_OversizedFrames(t *testing.T) {
	m := newTestMux(t, MuxConfig{})
	server := newTestRPCServer(t, m)
	addr := m.Addr().String()
	client := m.RPCClient()
	server.Handle("huge", func(context.Context, json.RawMessage) (any, error) {
		return strings.Repeat("x", MaxFrameSize), nil
	})

	big := strings.Repeat("x", MaxFrameSize)
	if err := client.Call(context.Background(), addr, "echo", big, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("Call with oversized request = %v, want ErrFrameTooLarge", err)
	}

	var remote *RPCError
	if err := client.Call(context.Background(), addr, "huge", nil, nil); !errors.As(err, &remote) || remote.Code != CodeInternal {
		t.Errorf("Call with oversized reply = %v, want code %q", err, CodeInternal)
	}

	conn, err := m.DialRPC(context.Background(), addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], MaxFrameSize+1)
	if _, err := conn.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	expectClosedByPeer(t, conn)

	callEcho(t, client, addr)
}

// One connection carries several calls, including a request sent before the
// previous reply arrived (the server keeps the bytes it read meanwhile).
func TestRPC_SequentialCallsOnOneConn(t *testing.T) {
	m := newTestMux(t, MuxConfig{})
	newTestRPCServer(t, m)
	conn, err := m.DialRPC(context.Background(), m.Addr().String(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	writeRequest(t, conn, "echo", `{"n":1}`)
	expectReply(t, conn, `{"n":1}`)
	// Both in one write, so the third is waiting while the second runs.
	var pipelined bytes.Buffer
	writeRequest(t, &pipelined, "echo", `{"n":2}`)
	writeRequest(t, &pipelined, "echo", `{"n":3}`)
	if _, err := conn.Write(pipelined.Bytes()); err != nil {
		t.Fatal(err)
	}
	expectReply(t, conn, `{"n":2}`)
	expectReply(t, conn, `{"n":3}`)
}

// A caller's deadline ends its call with a deadline error, and hanging up
// cancels the handler's context even though the server stays open.
func TestRPC_DeadlineHonoured(t *testing.T) {
	server, addr, client := rpcPair(t)
	handlerDone := make(chan error, 1)
	server.Handle("block", func(ctx context.Context, _ json.RawMessage) (any, error) {
		<-ctx.Done()
		handlerDone <- ctx.Err()
		return nil, ctx.Err()
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := client.Call(ctx, addr, "block", nil, nil)
	var remote *RPCError
	if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &remote) {
		t.Fatalf("Call = %v, want a local context.DeadlineExceeded", err)
	}
	if err := <-handlerDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler ctx ended with %v, want Canceled (caller hung up)", err)
	}
}

// Cancelling a ctx without a deadline also ends the call.
func TestRPC_CancelEndsCall(t *testing.T) {
	server, addr, client := rpcPair(t)
	entered := make(chan struct{})
	server.Handle("block", func(ctx context.Context, _ json.RawMessage) (any, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	})

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-entered
		cancel()
	}()
	if err := client.Call(ctx, addr, "block", nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Call = %v, want context.Canceled", err)
	}
}

// Close during a call cancels the handler, closes the conn, and the caller
// gets a local error: the server went away, it did not answer.
func TestRPC_CloseUnblocksInFlightCall(t *testing.T) {
	server, addr, client := rpcPair(t)
	entered := make(chan struct{})
	server.Handle("block", func(ctx context.Context, _ json.RawMessage) (any, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	})

	callErr := make(chan error, 1)
	go func() { callErr <- client.Call(context.Background(), addr, "block", nil, nil) }()
	<-entered
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	err := <-callErr
	var remote *RPCError
	if err == nil || errors.As(err, &remote) {
		t.Fatalf("Call = %v, want a local error", err)
	}
	if err := server.Serve(nil); err != nil {
		t.Fatalf("Serve after Close = %v, want nil", err)
	}
}

// The server accepts any net.Listener, and Serve stops with an error when
// the listener is closed under it rather than by Close.
func TestRPCServer_ListenerClosedUnderneath(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewRPCServer(nil)
	defer s.Close()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	ln.Close()
	if err := <-served; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve = %v, want net.ErrClosed", err)
	}
}

func writeRequest(t *testing.T, w io.Writer, method, body string) {
	t.Helper()
	frame, err := json.Marshal(rpcRequest{Method: method, Body: json.RawMessage(body)})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(w, frame); err != nil {
		t.Fatal(err)
	}
}

func expectReply(t *testing.T, conn net.Conn, body string) {
	t.Helper()
	frame, err := readFrame(conn)
	if err != nil {
		t.Fatal(err)
	}
	var reply rpcResponse
	if err := json.Unmarshal(frame, &reply); err != nil {
		t.Fatal(err)
	}
	if reply.Error != nil || string(reply.Body) != body {
		t.Fatalf("reply = %s, want body %s", frame, body)
	}
}

// While a handler runs, the server reads the conn to notice a hang-up. A
// byte it reads meanwhile belongs to the next frame and must not be lost;
// a peer that closes cancels the call; a quiet peer changes nothing.
func TestConnReader_WatchHangup(t *testing.T) {
	frame, err := json.Marshal(rpcRequest{Method: "echo", Body: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	var wire bytes.Buffer
	if err := writeFrame(&wire, frame); err != nil {
		t.Fatal(err)
	}

	t.Run("byte read while watching is kept", func(t *testing.T) {
		server, client := net.Pipe()
		defer server.Close()
		defer client.Close()
		r := &connReader{conn: server}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		stop := r.watchHangup(cancel)
		// net.Pipe does not buffer: this Write returns once the watcher
		// has read the byte.
		if _, err := client.Write(wire.Bytes()[:1]); err != nil {
			t.Fatal(err)
		}
		if stop() {
			t.Fatal("stop reported a hang-up")
		}
		if ctx.Err() != nil {
			t.Fatal("call cancelled though the peer is still there")
		}
		go client.Write(wire.Bytes()[1:])
		server.SetReadDeadline(time.Now().Add(hangGuard))
		got, err := readFrame(r)
		if err != nil || !bytes.Equal(got, frame) {
			t.Fatalf("readFrame = %q, %v; want %q", got, err, frame)
		}
	})

	t.Run("hang-up cancels", func(t *testing.T) {
		server, client := net.Pipe()
		defer server.Close()
		r := &connReader{conn: server}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		stop := r.watchHangup(cancel)
		client.Close()
		<-ctx.Done()
		if !stop() {
			t.Fatal("stop did not report the hang-up")
		}
	})

	t.Run("quiet peer", func(t *testing.T) {
		server, client := net.Pipe()
		defer server.Close()
		defer client.Close()
		r := &connReader{conn: server}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		if r.watchHangup(cancel)() {
			t.Fatal("stop reported a hang-up")
		}
		if ctx.Err() != nil {
			t.Fatal("call cancelled though the peer is still there")
		}
		go client.Write(wire.Bytes())
		server.SetReadDeadline(time.Now().Add(hangGuard))
		if got, err := readFrame(r); err != nil || !bytes.Equal(got, frame) {
			t.Fatalf("readFrame after stop = %q, %v; want %q", got, err, frame)
		}
	})
}

// A connection that opens the RPC protocol and then says nothing is closed
// after the idle timeout instead of holding a goroutine and a descriptor.
func TestRPC_IdleConnectionClosed(t *testing.T) {
	m := newTestMux(t, MuxConfig{})
	s := NewRPCServer(testLogger(t.Name()))
	s.IdleTimeout = 200 * time.Millisecond
	s.Handle("echo", func(_ context.Context, body json.RawMessage) (any, error) { return body, nil })
	served := make(chan error, 1)
	go func() { served <- s.Serve(m.RPCListener()) }()
	t.Cleanup(func() {
		s.Close()
		<-served
	})

	silent, err := m.DialRPC(context.Background(), m.Addr().String(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	expectClosedByPeer(t, silent)
}
