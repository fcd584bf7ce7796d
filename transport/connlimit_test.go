package transport

import (
	"net"
	"testing"
	"time"
)

func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: hangGuard}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Connections over the total or the per-host bound are closed at once;
// the others are served, and a closed one frees its place.
func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitListener(raw, 3, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	addr := raw.Addr().String()
	take := func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(hangGuard):
			t.Fatal("no connection accepted")
			return nil
		}
	}
	a1 := dialFrom(t, "127.0.0.1", addr)
	take()
	dialFrom(t, "127.0.0.1", addr)
	s2 := take()
	third := dialFrom(t, "127.0.0.1", addr) // over the per-host bound
	expectClosedByPeer(t, third)
	dialFrom(t, "127.0.0.2", addr)
	take()
	fourth := dialFrom(t, "127.0.0.3", addr) // over the total
	expectClosedByPeer(t, fourth)
	if got := l.Refused(); got != 2 {
		t.Fatalf("refused %d, want 2", got)
	}
	if got := l.Open(); got != 3 {
		t.Fatalf("open %d, want 3", got)
	}
	s2.Close()
	a1.Close()
	dialFrom(t, "127.0.0.1", addr) // a place is free again
	take()
}
