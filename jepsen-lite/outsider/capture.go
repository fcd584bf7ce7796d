package outsider

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"time"
	"unicode"

	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// capture listens at the address the attacks offer as a member's API
// address and records every connection it gets, whatever it speaks (HTTP,
// HTTPS, or nothing), then hangs up. Nobody has a reason to connect: one
// that does followed an address an attack planted.
type capture struct {
	ln  net.Listener
	rec *history.Recorder
	log hclog.Logger

	mu sync.Mutex
	n  int
	wg sync.WaitGroup
}

// captureRead bounds the wait for a connection's first bytes.
const captureRead = time.Second

func listenCapture(addr string, rec *history.Recorder, log hclog.Logger) (*capture, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("outsider: capture server: %w", err)
	}
	c := &capture{ln: ln, rec: rec, log: log}
	c.wg.Go(c.serve)
	return c, nil
}

func (c *capture) addr() string { return c.ln.Addr().String() }

func (c *capture) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *capture) serve() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.wg.Go(func() { c.record(conn) })
	}
}

// record notes one connection: who, and what its first bytes looked like.
func (c *capture) record(conn net.Conn) {
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(captureRead))
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	c.mu.Lock()
	c.n++
	count := c.n
	c.mu.Unlock()
	from := conn.RemoteAddr().String()
	first := firstBytes(buf[:n])
	c.log.Error("capture server reached", "from", from, "first", first, "count", count)
	c.rec.Append(history.Entry{Kind: history.KindOutsiderCapture, Process: Process,
		Capture: &history.Capture{From: from, First: first, Count: count}})
}

// firstBytes names a protocol from a connection's first bytes: a TLS
// handshake, HTTP/2's preface, or the printable start of an HTTP/1 request
// line (its path and headers are cut: they may carry a secret).
func firstBytes(b []byte) string {
	switch {
	case len(b) == 0:
		return ""
	case b[0] == 0x16:
		return "tls"
	case bytes.HasPrefix(b, []byte("PRI * HTTP/2.0")):
		return "http/2"
	}
	method, _, ok := bytes.Cut(b, []byte(" "))
	if ok && len(method) > 0 && bytes.IndexFunc(method, func(r rune) bool { return !unicode.IsUpper(r) }) < 0 {
		return "http/1 " + string(method)
	}
	return fmt.Sprintf("%d bytes", len(b))
}

func (c *capture) close() error {
	err := c.ln.Close()
	c.wg.Wait()
	return err
}
