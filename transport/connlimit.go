package transport

import (
	"net"
	"sync"
	"sync/atomic"
)

// LimitListener wraps ln so that at most total connections are open at
// once, and at most perHost from one source address (IP). A connection over
// either bound is closed as soon as it is accepted, before anything is read
// from it, and counted in Refused; the listener keeps accepting. Zero
// means no bound. The cap keeps file descriptors for the callers within
// it: a flood of idle connections from one host cannot take them all.
func LimitListener(ln net.Listener, total, perHost int) *ConnLimiter {
	return &ConnLimiter{Listener: ln, total: total, perHost: perHost, byHost: map[string]int{}}
}

// ConnLimiter is a listener with connection bounds (LimitListener).
type ConnLimiter struct {
	net.Listener
	total, perHost int

	mu     sync.Mutex
	open   int
	byHost map[string]int

	refused atomic.Uint64
}

// Refused counts connections closed for being over a bound.
func (l *ConnLimiter) Refused() uint64 { return l.refused.Load() }

// Open is the number of connections open now.
func (l *ConnLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Accept returns the next connection within the bounds.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := hostOf(c.RemoteAddr())
		if l.admit(host) {
			return &limitedConn{Conn: c, l: l, host: host}, nil
		}
		l.refused.Add(1)
		c.Close()
	}
}

func (l *ConnLimiter) admit(host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total > 0 && l.open >= l.total || l.perHost > 0 && l.byHost[host] >= l.perHost {
		return false
	}
	l.open++
	l.byHost[host]++
	return true
}

func (l *ConnLimiter) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byHost[host]--; l.byHost[host] <= 0 {
		delete(l.byHost, host)
	}
}

func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// limitedConn gives its place back when closed, once.
type limitedConn struct {
	net.Conn
	l    *ConnLimiter
	host string
	once sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.release(c.host) })
	return c.Conn.Close()
}
