package api

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/leasehold/leasehold/transport"
)

// errHostNotAllowed refuses a request to a node without API
// authentication that calls it by a name it does not answer to.
var errHostNotAllowed = fmt.Errorf("this node has no API authentication, so it answers only requests that call it by an IP address, localhost or its advertised API name (see docs/security.md)")

// guardHost protects a node without API authentication (leasehold dev, a
// loopback server, --insecure) from DNS rebinding: a web page whose own
// name an attacker re-points at 127.0.0.1 may call the node from the
// developer's browser as if it were the page's own server, with no
// credentials to stop it. Such a request names the page's host in Host,
// so the node answers only a Host that is an IP address, localhost (or a
// name under it), or one of the names it was given (its advertised API
// host). With authentication on, the credentials decide: a browser does
// not send a bearer token by itself. Requests over the peer port come from
// members, and /livez and /readyz stay open to load balancers by any name.
func (s *Server) guardHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.creds.Load().Enabled() || openPaths[r.URL.Path] || s.hostAllowed(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		if _, viaPeer := transport.PeerFromContext(r.Context()); viaPeer {
			next.ServeHTTP(w, r)
			return
		}
		s.writeRefusal(w, r, toWire(fmt.Errorf("%w (Host %q)", errHostNotAllowed, clipText(r.Host))))
	})
}

// hostAllowed reports whether host (a Host header: name or address, with
// or without a port) calls this node by a name it answers to.
func (s *Server) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" {
		return true // HTTP/1.0 without Host: no browser sends it
	}
	if net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	return s.names[host]
}
