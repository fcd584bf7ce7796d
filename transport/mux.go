package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Connection types: the first byte a client sends on the Raft port.
// Append-only; a value, once released, keeps its meaning forever.
const (
	typeRaft byte = 0x01
	typeRPC  byte = 0x02
	// typeAPI carries the public API between nodes: a follower forwards a
	// request to the leader over the peer port, authenticated as itself,
	// instead of sending the caller's credentials to the leader's API port.
	typeAPI byte = 0x03
)

// DefaultHandshakeTimeout bounds the TLS handshake and the type byte of an
// inbound connection when MuxConfig.HandshakeTimeout is zero.
const DefaultHandshakeTimeout = 5 * time.Second

// Dialer opens outbound connections. It is a seam: tests wrap it to refuse or
// delay dials. The context carries the caller's deadline.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// MuxConfig configures a Mux. The zero values of the optional fields are the
// defaults; NewMux does not modify the config.
type MuxConfig struct {
	// Listener is the node's Raft port. Required. Once NewMux succeeds the
	// Mux owns it and closes it in Close; if NewMux fails it stays the
	// caller's.
	Listener net.Listener
	// Advertise is the host:port peers dial to reach this node. Default:
	// Listener.Addr(). It must not be an unspecified address (0.0.0.0, ::).
	Advertise string
	// ServerTLS, if set, wraps every inbound connection in TLS. Set
	// ClientAuth to tls.RequireAndVerifyClientCert for mutual TLS.
	ServerTLS *tls.Config
	// ClientTLS, if set, wraps every outbound connection in TLS. An empty
	// ServerName is filled in with the host part of the dialed address.
	ClientTLS *tls.Config
	// Dial opens outbound TCP connections. Default: a net.Dialer.
	Dial Dialer
	// Logger receives the Mux's logs under the name "mux". Default: none.
	Logger hclog.Logger
	// HandshakeTimeout bounds the TLS handshake plus the type byte of each
	// inbound connection. Default: DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
}

// validate checks cfg and returns the advertise address to use.
func (cfg *MuxConfig) validate() (string, error) {
	if cfg.Listener == nil {
		return "", fmt.Errorf("%w: Listener is nil", ErrInvalidConfig)
	}
	if cfg.HandshakeTimeout < 0 {
		return "", fmt.Errorf("%w: HandshakeTimeout %v is negative", ErrInvalidConfig, cfg.HandshakeTimeout)
	}
	if cfg.ServerTLS != nil && len(cfg.ServerTLS.Certificates) == 0 &&
		cfg.ServerTLS.GetCertificate == nil && cfg.ServerTLS.GetConfigForClient == nil {
		return "", fmt.Errorf("%w: ServerTLS has no certificate", ErrInvalidConfig)
	}
	advertise := cfg.Advertise
	if advertise == "" {
		advertise = cfg.Listener.Addr().String()
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		return "", fmt.Errorf("%w: Advertise %q: %v", ErrInvalidConfig, advertise, err)
	}
	// A peer cannot dial 0.0.0.0; raft's own TCP transport refuses it too.
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", fmt.Errorf("%w: Advertise %q is not an address peers can dial", ErrInvalidConfig, advertise)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("%w: Advertise %q has no usable port", ErrInvalidConfig, advertise)
	}
	return advertise, nil
}

// Mux serves Raft and the node-to-node RPC on one listener, telling them
// apart by the first byte of each connection. It also dials peers for both.
type Mux struct {
	ln               net.Listener
	advertise        advertiseAddr
	serverTLS        *tls.Config
	clientTLS        *tls.Config
	dialer           Dialer
	logger           hclog.Logger
	handshakeTimeout time.Duration

	raft *subListener
	rpc  *subListener
	api  *subListener

	// ctx is cancelled by Close; it aborts outbound dials in progress.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	pending map[net.Conn]struct{} // inbound conns still in handshake
	// wg counts Serve and the per-connection goroutines. Add happens under mu
	// and only while !closed, so it never races with Close's Wait.
	wg sync.WaitGroup
}

// NewMux checks cfg and returns a Mux that is not yet accepting: call Serve.
func NewMux(cfg MuxConfig) (*Mux, error) {
	advertise, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	dialer := cfg.Dial
	if dialer == nil {
		dialer = (&net.Dialer{}).DialContext
	}
	timeout := cfg.HandshakeTimeout
	if timeout == 0 {
		timeout = DefaultHandshakeTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := advertiseAddr(advertise)
	return &Mux{
		ln:               cfg.Listener,
		advertise:        addr,
		serverTLS:        cfg.ServerTLS,
		clientTLS:        cfg.ClientTLS,
		dialer:           dialer,
		logger:           logger.Named("mux"),
		handshakeTimeout: timeout,
		raft:             newSubListener(addr),
		rpc:              newSubListener(addr),
		api:              newSubListener(addr),
		ctx:              ctx,
		cancel:           cancel,
		pending:          make(map[net.Conn]struct{}),
	}, nil
}

// Addr returns the advertise address.
func (m *Mux) Addr() net.Addr { return m.advertise }

// RPCListener returns the listener that yields RPC (0x02) connections, for
// RPCServer.Serve. It is the same listener on every call.
func (m *Mux) RPCListener() net.Listener { return m.rpc }

// APIListener returns the listener that yields API (0x03) connections:
// requests other nodes forward to this one. PeerOf tells who sent them.
func (m *Mux) APIListener() net.Listener { return m.api }

// Serve accepts connections until Close, handling each in its own goroutine.
// It returns nil after Close, and an error if the listener fails for another
// reason. Run it in its own goroutine.
func (m *Mux) Serve() error {
	if !m.add() {
		return nil
	}
	defer m.wg.Done()
	return acceptLoop(m.ctx, m.ln, m, m.logger, "mux", m.handle)
}

// Close stops Serve, closes the listener, both sub-listeners, every
// connection still in handshake and every accepted connection still open,
// and waits for the Mux's goroutines. Calls after the first return nil.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	pending := m.pending
	m.pending = nil
	m.mu.Unlock()

	m.cancel()
	err := m.ln.Close()
	for _, l := range []*subListener{m.raft, m.rpc, m.api} {
		l.Close()
	}
	for conn := range pending {
		conn.Close()
	}
	for _, l := range []*subListener{m.raft, m.rpc, m.api} {
		l.closeLive()
	}
	m.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// handle finishes the handshake of one inbound conn and hands it over.
func (m *Mux) handle(raw net.Conn) {
	defer m.wg.Done()
	conn, typ, err := m.handshake(raw)
	if !m.untrack(raw) {
		return // Close has closed it already
	}
	if err != nil {
		m.logger.Debug("dropped connection in handshake", "remote_addr", raw.RemoteAddr().String(), "error", err)
		raw.Close()
		return
	}
	switch typ {
	case typeRaft:
		m.raft.handoff(conn)
	case typeRPC:
		m.rpc.handoff(conn)
	case typeAPI:
		m.api.handoff(conn)
	default:
		m.logger.Debug("dropped connection of unknown type", "remote_addr", raw.RemoteAddr().String(), "type", typ)
		conn.Close()
	}
}

// handshake completes TLS (if configured) and reads the type byte, both
// within one deadline so a silent client costs one goroutine for at most
// handshakeTimeout.
func (m *Mux) handshake(raw net.Conn) (net.Conn, byte, error) {
	if err := raw.SetDeadline(time.Now().Add(m.handshakeTimeout)); err != nil {
		return nil, 0, err
	}
	conn := raw
	if m.serverTLS != nil {
		tc := tls.Server(raw, m.serverTLS)
		if err := tc.Handshake(); err != nil {
			return nil, 0, fmt.Errorf("tls handshake: %w", err)
		}
		conn = authenticate(tc, m.serverTLS)
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return nil, 0, fmt.Errorf("read type byte: %w", err)
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return nil, 0, err
	}
	return conn, b[0], nil
}

func (m *Mux) add() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	return true
}

func (m *Mux) track(conn net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.pending[conn] = struct{}{}
	m.wg.Add(1)
	return true
}

// untrack reports false if Close got to the conn first.
func (m *Mux) untrack(conn net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	delete(m.pending, conn)
	return true
}

func (m *Mux) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// advertiseAddr is the address peers dial, as given.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }
