package clustertest

import (
	"net"
	"testing"
)

// A connection recorded after its link was cut (dialed or accepted while
// the Cut ran) is closed, not kept alive past the cut.
func TestTrackRefusesACutLink(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server, ok := <-accepted
	if !ok {
		t.Fatal("nothing accepted")
	}
	defer server.Close()

	n := newNet()
	n.Cut("127.0.0.1", "127.0.0.1")
	if tc, ok := n.track(c); ok || tc != nil {
		t.Fatal("a connection on a cut link was tracked, so it outlives the cut")
	}
	if len(n.conns) != 0 {
		t.Fatalf("%d connections tracked", len(n.conns))
	}
	// Closed: the other end reads EOF.
	if _, err := server.Read(make([]byte, 1)); err == nil {
		t.Fatal("the refused connection is still open")
	}
	n.HealAll()
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err == nil {
		defer c2.Close()
		if _, ok := n.track(c2); !ok {
			t.Fatal("a connection on a healed link was refused")
		}
	}
}
