package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// RPCHandler answers one call. body is the caller's request as sent (JSON,
// "null" if it sent nil); the result is encoded as JSON. ctx ends when the
// caller hangs up or the server closes, and the handler must return then:
// RPCServer.Close waits for it. PeerFromContext(ctx) says who is calling.
type RPCHandler func(ctx context.Context, body json.RawMessage) (any, error)

// CodedError is an error that chooses its own wire code. A handler error
// implementing it (anywhere in its chain) reaches the caller as an *RPCError
// with this code and these details; any other error becomes CodeInternal.
type CodedError interface {
	error
	RPCCode() string
	RPCDetails() map[string]string
}

// DefaultRPCIdleTimeout bounds the wait for a request on an RPC connection.
const DefaultRPCIdleTimeout = 10 * time.Second

// RPCServer answers node-to-node calls on the listeners given to Serve. A
// connection carries calls one after another; each runs in the connection's
// goroutine.
type RPCServer struct {
	logger hclog.Logger
	// IdleTimeout closes a connection that sends no request for this long
	// (callers open one connection per call and send at once). Set it
	// before Serve; zero means DefaultRPCIdleTimeout.
	IdleTimeout time.Duration

	// ctx is the parent of every call's context; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	handlers  map[string]RPCHandler
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	// wg counts Serve loops and connection goroutines; Add happens under mu
	// and only while !closed.
	wg sync.WaitGroup
}

// NewRPCServer returns a server with no methods. logger may be nil.
func NewRPCServer(logger hclog.Logger) *RPCServer {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &RPCServer{
		logger:    logger.Named("rpc"),
		ctx:       ctx,
		cancel:    cancel,
		handlers:  make(map[string]RPCHandler),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
	}
}

// Handle registers h for method. Registering a method twice is a programming
// error and panics, so two packages cannot silently fight over a name.
func (s *RPCServer) Handle(method string, h RPCHandler) {
	if method == "" || h == nil {
		panic("transport: Handle needs a method name and a handler")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.handlers[method]; dup {
		panic(fmt.Sprintf("transport: RPC method %q registered twice", method))
	}
	s.handlers[method] = h
}

// Serve accepts connections on ln until Close and serves each in its own
// goroutine. It returns nil after Close, and an error if ln fails for
// another reason (for instance when the Mux closed first). Serve may run on
// several listeners at once.
func (s *RPCServer) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.listeners[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln) // no-op after Close, which took the map
		s.mu.Unlock()
	}()
	return acceptLoop(s.ctx, ln, s, s.logger, "rpc", s.serveConn)
}

// Close stops every Serve loop, closes every connection, cancels the calls
// in flight and waits for their handlers to return. Calls after the first
// return nil.
func (s *RPCServer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	listeners, conns := s.listeners, s.conns
	s.listeners, s.conns = nil, nil
	s.mu.Unlock()

	// Conns first: a handler cancelled before its conn is closed could still
	// send a reply, and callers would see a cancellation as the remote's
	// answer rather than as the server going away.
	for ln := range listeners {
		ln.Close()
	}
	for conn := range conns {
		conn.Close()
	}
	s.cancel()
	s.wg.Wait()
	return nil
}

// serveConn answers calls on conn one at a time until the peer hangs up, a
// frame is bad, or the server closes.
func (s *RPCServer) serveConn(conn net.Conn) {
	defer s.wg.Done()
	defer s.untrack(conn)
	r := &connReader{conn: conn}
	base := ContextWithPeer(s.ctx, conn)
	idle := s.IdleTimeout
	if idle <= 0 {
		idle = DefaultRPCIdleTimeout
	}
	for {
		// A connection that says nothing is closed rather than kept.
		conn.SetReadDeadline(time.Now().Add(idle))
		frame, err := readFrame(r)
		conn.SetReadDeadline(time.Time{})
		if err != nil {
			if !errors.Is(err, io.EOF) && !s.isClosed() {
				s.logger.Debug("closing connection", "remote_addr", conn.RemoteAddr().String(), "error", err)
			}
			return
		}
		var req rpcRequest
		if err := json.Unmarshal(frame, &req); err != nil {
			s.logger.Debug("closing connection: malformed request", "remote_addr", conn.RemoteAddr().String(), "error", err)
			return
		}
		reply, peerGone := s.call(base, r, req)
		if peerGone {
			return
		}
		if err := writeFrame(conn, reply); err != nil {
			s.logger.Debug("closing connection: write failed", "remote_addr", conn.RemoteAddr().String(), "error", err)
			return
		}
	}
}

// call runs the handler for req and returns the encoded reply. peerGone
// reports that the caller hung up meanwhile, so there is no one to reply to.
func (s *RPCServer) call(base context.Context, r *connReader, req rpcRequest) (reply []byte, peerGone bool) {
	s.mu.Lock()
	h := s.handlers[req.Method]
	s.mu.Unlock()
	if h == nil {
		return encodeError(&RPCError{Code: CodeUnknownMethod, Message: fmt.Sprintf("unknown method %q", req.Method)}), false
	}
	body := req.Body
	if len(body) == 0 {
		body = json.RawMessage("null")
	}

	ctx, cancel := context.WithCancel(base)
	defer cancel()
	stopWatch := r.watchHangup(cancel)
	result, err := h(ctx, body)
	if stopWatch() {
		return nil, true
	}

	if err != nil {
		var coded CodedError
		if errors.As(err, &coded) {
			s.logger.Debug("rpc refused", "method", req.Method, "code", coded.RPCCode(), "error", err)
			return encodeError(&RPCError{Code: coded.RPCCode(), Message: err.Error(), Details: coded.RPCDetails()}), false
		}
		s.logger.Warn("rpc handler failed", "method", req.Method, "error", err)
		return encodeError(&RPCError{Code: CodeInternal, Message: err.Error()}), false
	}
	out, err := json.Marshal(result)
	if err == nil {
		out, err = json.Marshal(rpcResponse{Body: out})
	}
	if err == nil && len(out) > MaxFrameSize {
		err = fmt.Errorf("%w: reply of %d bytes", ErrFrameTooLarge, len(out))
	}
	if err != nil {
		s.logger.Warn("rpc reply not sent", "method", req.Method, "error", err)
		return encodeError(&RPCError{Code: CodeInternal, Message: "encode reply: " + err.Error()}), false
	}
	return out, false
}

// encodeError encodes e as a response frame body. A message or details too
// large for a frame are dropped rather than the error itself.
func encodeError(e *RPCError) []byte {
	out, err := json.Marshal(rpcResponse{Error: &wireError{Code: e.Code, Message: e.Message, Details: e.Details}})
	if err != nil || len(out) > MaxFrameSize {
		out, _ = json.Marshal(rpcResponse{Error: &wireError{Code: e.Code, Message: "error too large to send"}})
	}
	return out
}

func (s *RPCServer) track(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[conn] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *RPCServer) untrack(conn net.Conn) {
	s.mu.Lock()
	if s.conns != nil {
		delete(s.conns, conn)
	}
	s.mu.Unlock()
	conn.Close()
}

func (s *RPCServer) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// connReader reads a conn, first giving back any bytes the hang-up watcher
// read while a handler ran.
type connReader struct {
	conn net.Conn
	buf  []byte
}

func (r *connReader) Read(p []byte) (int, error) {
	if len(r.buf) > 0 {
		n := copy(p, r.buf)
		r.buf = r.buf[n:]
		return n, nil
	}
	return r.conn.Read(p)
}

// aLongTimeAgo is a deadline that has passed: setting it interrupts a Read.
var aLongTimeAgo = time.Unix(1, 0)

// watchHangup reads the conn while a handler runs, so a caller that gives up
// and closes its end cancels the handler instead of leaving it to run to
// completion. The returned stop interrupts the read, keeps any byte it got
// for the next frame, and reports whether the peer is gone.
func (r *connReader) watchHangup(cancel context.CancelFunc) (stop func() bool) {
	type result struct {
		n   int
		err error
	}
	var b [1]byte
	done := make(chan result, 1)
	go func() {
		n, err := r.conn.Read(b[:])
		if peerGone(err) {
			cancel()
		}
		done <- result{n, err}
	}()
	return func() bool {
		r.conn.SetReadDeadline(aLongTimeAgo)
		res := <-done
		r.conn.SetReadDeadline(time.Time{})
		r.buf = append(r.buf, b[:res.n]...)
		return peerGone(res.err)
	}
}

// peerGone tells a failed read from the interruption stop causes.
func peerGone(readErr error) bool {
	return readErr != nil && !errors.Is(readErr, os.ErrDeadlineExceeded)
}
