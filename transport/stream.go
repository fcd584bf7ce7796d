package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// errListenerClosed matches both ErrClosed and net.ErrClosed, so accept loops
// written for plain listeners (raft's among them) stop on it.
var errListenerClosed = fmt.Errorf("%w: %w", ErrClosed, net.ErrClosed)

// subListener is the net.Listener for one connection type: Accept returns
// the conns the Mux hands over.
type subListener struct {
	addr      net.Addr
	conns     chan net.Conn // unbuffered, so no conn is left behind on Close
	done      chan struct{}
	closeOnce sync.Once

	// live holds the conns Accept handed out and their consumer has not
	// closed. Raft's transport never closes the streams it accepted (it
	// waits for the peer to hang up), so Mux.Close closes them: a stopped
	// node leaves no reader goroutine behind.
	mu   sync.Mutex
	live map[*ownedConn]struct{}
}

func newSubListener(addr net.Addr) *subListener {
	return &subListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{}), live: map[*ownedConn]struct{}{}}
}

// ownedConn untracks itself when its consumer closes it.
type ownedConn struct {
	net.Conn
	l    *subListener
	once sync.Once
}

func (c *ownedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.live, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// closeLive closes every conn handed out and still open.
func (l *subListener) closeLive() {
	l.mu.Lock()
	conns := make([]*ownedConn, 0, len(l.live))
	for c := range l.live {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Accept waits for the next conn of this type.
func (l *subListener) Accept() (net.Conn, error) {
	select {
	case conn := <-l.conns:
		// Both cases may have been ready; a closed listener hands out nothing.
		select {
		case <-l.done:
			conn.Close()
			return nil, errListenerClosed
		default:
			oc := &ownedConn{Conn: conn, l: l}
			l.mu.Lock()
			l.live[oc] = struct{}{}
			l.mu.Unlock()
			return oc, nil
		}
	case <-l.done:
		return nil, errListenerClosed
	}
}

// Close stops Accept. It does not close the Mux: raft's transport closes its
// stream layer on shutdown while the RPC half keeps working.
func (l *subListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

// Addr returns the Mux's advertise address.
func (l *subListener) Addr() net.Addr { return l.addr }

// handoff waits until Accept takes conn or the listener closes. Waiting here
// blocks only this conn's goroutine, never the Mux's accept loop.
func (l *subListener) handoff(conn net.Conn) {
	select {
	case l.conns <- conn:
	case <-l.done:
		conn.Close()
	}
}

// raftLayer is the raft.StreamLayer: the 0x01 sub-listener plus dialing.
type raftLayer struct {
	*subListener
	mux *Mux
}

// RaftLayer returns the stream layer for raft.NetworkTransport. It is the
// same layer on every call; raft closing it leaves the RPC half running.
func (m *Mux) RaftLayer() raft.StreamLayer { return raftLayer{subListener: m.raft, mux: m} }

// Dial opens a Raft stream to address; timeout bounds the dial, the TLS
// handshake and the type byte (zero: no bound).
func (l raftLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return l.mux.dial(ctx, string(address), typeRaft, "")
}

// DialRPC opens an RPC (0x02) connection to addr, bounded by ctx. RPCClient
// uses it; it is exported for callers that need their own client. With
// peer TLS, a non-empty nodeID must be the id the remote's certificate
// names; otherwise any server of the cluster will do.
func (m *Mux) DialRPC(ctx context.Context, addr, nodeID string) (net.Conn, error) {
	return m.dial(ctx, addr, typeRPC, nodeID)
}

// DialAPI opens an API (0x03) connection to the node nodeID at addr, for
// forwarding a request to it. With peer TLS the remote must prove it is
// nodeID, so a caller's request never reaches anyone else.
func (m *Mux) DialAPI(ctx context.Context, addr, nodeID string) (net.Conn, error) {
	return m.dial(ctx, addr, typeAPI, nodeID)
}

// PeerTLS reports whether the peer port runs mutual TLS, so connections
// are authenticated.
func (m *Mux) PeerTLS() bool { return m.clientTLS != nil && m.serverTLS != nil }

// dial connects to addr, completes TLS if configured (checking that the
// remote is nodeID, when given) and sends the type byte. Close aborts dials
// in progress.
func (m *Mux) dial(ctx context.Context, addr string, typ byte, nodeID string) (net.Conn, error) {
	if m.isClosed() {
		return nil, fmt.Errorf("transport: dial %s: %w", addr, ErrClosed)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(m.ctx, cancel)
	defer stop()

	conn, err := m.dialer(ctx, "tcp", addr)
	if err != nil {
		return nil, m.dialError(addr, "connect", err)
	}
	if m.clientTLS != nil {
		tc := tls.Client(conn, m.clientConfig(addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, m.dialError(addr, "tls handshake", err)
		}
		if err := checkRemoteID(tc, nodeID); err != nil {
			conn.Close()
			return nil, m.dialError(addr, "tls identity", err)
		}
		conn = tc
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetWriteDeadline(dl)
	}
	if _, err := conn.Write([]byte{typ}); err != nil {
		conn.Close()
		return nil, m.dialError(addr, "write type byte", err)
	}
	if err := conn.SetWriteDeadline(time.Time{}); err != nil {
		conn.Close()
		return nil, m.dialError(addr, "clear deadline", err)
	}
	return conn, nil
}

// dialError wraps a failed dial step; one aborted by Close also matches
// ErrClosed, so callers see the node shutting down rather than a network
// fault.
func (m *Mux) dialError(addr, step string, err error) error {
	if m.ctx.Err() != nil {
		return fmt.Errorf("transport: dial %s: %s: %w: %w", addr, step, ErrClosed, err)
	}
	return fmt.Errorf("transport: dial %s: %s: %w", addr, step, err)
}

// clientConfig fills in ServerName from addr so certificates are verified
// against the host being dialed.
func (m *Mux) clientConfig(addr string) *tls.Config {
	if m.clientTLS.ServerName != "" {
		return m.clientTLS
	}
	cfg := m.clientTLS.Clone()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		cfg.ServerName = host
	} else {
		cfg.ServerName = addr
	}
	return cfg
}

// checkRemoteID refuses a server that is not nodeID (when nodeID is set).
func checkRemoteID(tc *tls.Conn, nodeID string) error {
	if nodeID == "" {
		return nil
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return fmt.Errorf("%w: the remote presented no certificate", ErrWrongPeer)
	}
	id, err := IdentityOf(certs[0])
	if err != nil {
		return fmt.Errorf("%w: %w", ErrWrongPeer, err)
	}
	if id.Role != RoleServer || id.Name != nodeID {
		return fmt.Errorf("%w: want node %s, the remote is %s", ErrWrongPeer, nodeID, id)
	}
	return nil
}
