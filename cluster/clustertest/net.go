package clustertest

import (
	"context"
	"errors"
	"net"
	"sync"
)

// Net is the harness's loopback network. Node i lives at its own address
// 127.0.0.(10+i), listens there and dials from there, so a connection's two
// ends name the two nodes. Cutting a link refuses new connections between
// the two addresses (both ways) and closes the open ones.
type Net struct {
	mu      sync.Mutex
	blocked map[[2]string]bool
	conns   map[*trackedConn]bool
}

// ErrPartitioned is what a dial across a cut link fails with.
var ErrPartitioned = errors.New("clustertest: link cut")

func newNet() *Net {
	return &Net{blocked: map[[2]string]bool{}, conns: map[*trackedConn]bool{}}
}

func link(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Cut severs the link between two hosts (IPs).
func (n *Net) Cut(a, b string) {
	n.mu.Lock()
	n.blocked[link(a, b)] = true
	var doomed []*trackedConn
	for c := range n.conns {
		if link(c.local, c.remote) == link(a, b) {
			doomed = append(doomed, c)
		}
	}
	n.mu.Unlock()
	for _, c := range doomed {
		c.Close()
	}
}

// HealAll restores every link.
func (n *Net) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.blocked)
}

func (n *Net) isCut(a, b string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.blocked[link(a, b)]
}

// track records c so that a Cut of its link closes it, or closes it now
// and reports false if its link is cut. The check and the record are one
// step under mu: a connection dialed or accepted while a Cut runs is
// either among those the Cut closes or sees the cut here, and never
// outlives it (checked only before the dial, it could).
func (n *Net) track(c net.Conn) (net.Conn, bool) {
	lh, _, _ := net.SplitHostPort(c.LocalAddr().String())
	rh, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	t := &trackedConn{Conn: c, net: n, local: lh, remote: rh}
	n.mu.Lock()
	if n.blocked[link(lh, rh)] {
		n.mu.Unlock()
		c.Close()
		return nil, false
	}
	n.conns[t] = true
	n.mu.Unlock()
	return t, true
}

// dialer returns the dial function of the node at host.
func (n *Net) dialer(host string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(host)}}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		to, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if n.isCut(host, to) {
			return nil, ErrPartitioned
		}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		t, ok := n.track(c)
		if !ok {
			return nil, ErrPartitioned
		}
		return t, nil
	}
}

// listener wraps a node's listener: connections from cut hosts are closed
// as they arrive.
type listener struct {
	net.Listener
	net *Net
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if t, ok := l.net.track(c); ok {
			return t, nil
		}
	}
}

type trackedConn struct {
	net.Conn
	net           *Net
	local, remote string
	once          sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.net.mu.Lock()
		delete(c.net.conns, c)
		c.net.mu.Unlock()
	})
	return c.Conn.Close()
}
