package transport

import (
	"context"
	"crypto/tls"
	"net"
)

// Peer is who is at the other end of a connection to the peer port.
type Peer struct {
	// Addr is the connection's source address, for audit.
	Addr string
	// Authenticated: the connection presented a certificate from the peer
	// CA naming a server of this cluster (mutual TLS). Without peer TLS no
	// connection is authenticated and Identity is empty.
	Authenticated bool
	Identity      CertIdentity
}

// NodeID is the node id the peer proved it is, or "" when unauthenticated.
func (p Peer) NodeID() string {
	if !p.Authenticated {
		return ""
	}
	return p.Identity.Name
}

// String names the peer for logs and audit events.
func (p Peer) String() string {
	if p.Authenticated {
		return p.Identity.String()
	}
	return "unauthenticated"
}

type peerKey struct{}

// ContextWithPeer returns ctx carrying the peer at the other end of conn, a
// connection the Mux handed out (or any other: it is then unauthenticated).
// The API server's ConnContext uses it for requests forwarded over the
// peer port.
func ContextWithPeer(ctx context.Context, conn net.Conn) context.Context {
	return context.WithValue(ctx, peerKey{}, PeerOf(conn))
}

// PeerFromContext returns the peer a request came from, as set by
// ContextWithPeer or by the RPC server for each call. ok is false when the
// request did not come through the peer port.
func PeerFromContext(ctx context.Context) (p Peer, ok bool) {
	p, ok = ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// PeerOf says who is at the other end of conn. Only a connection the Mux
// accepted under mutual TLS is authenticated: its handshake verified the
// chain and the server identity (TLSMaterial.PeerConfigs).
func PeerOf(conn net.Conn) Peer {
	p := Peer{}
	if a := conn.RemoteAddr(); a != nil {
		p.Addr = a.String()
	}
	if oc, ok := conn.(*ownedConn); ok {
		conn = oc.Conn
	}
	ac, ok := conn.(*authConn)
	if !ok {
		return p
	}
	p.Authenticated, p.Identity = true, ac.id
	return p
}

// authConn is an inbound connection whose client certificate was verified
// and names id.
type authConn struct {
	net.Conn
	id CertIdentity
}

// authenticate wraps a TLS connection whose handshake required a verified
// client certificate; anything else stays unauthenticated.
func authenticate(conn net.Conn, cfg *tls.Config) net.Conn {
	tc, ok := conn.(*tls.Conn)
	if !ok || cfg == nil || (cfg.ClientAuth != tls.RequireAnyClientCert && cfg.ClientAuth != tls.RequireAndVerifyClientCert) ||
		(cfg.ClientAuth == tls.RequireAnyClientCert && cfg.VerifyConnection == nil) {
		return conn
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return conn
	}
	id, err := IdentityOf(certs[0])
	if err != nil || id.Role != RoleServer {
		return conn
	}
	return &authConn{Conn: conn, id: id}
}
