package api_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster/api"
	"github.com/leasehold/leasehold/cluster/clustertest"
)

// countingListener counts the reads made on the connections it accepts.
type countingListener struct {
	net.Listener
	reads *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.reads}, nil
}

type countingConn struct {
	net.Conn
	reads *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// Without TLS the server reads a connection through a buffer: frames that
// arrived together cost one read between them, not two reads each (a
// frame's header, then its payload, as net/http's HTTP/2 server reads
// them). Sixteen calls sent in one write, 32 frames, are answered after
// far fewer reads of the connection than frames.
func TestPlaintextConnectionReadsBuffered(t *testing.T) {
	var reads atomic.Int64
	c := clustertest.Prepare(t, 1)
	c.API = func(_ int, o *api.Options) { o.Credentials = testCreds }
	c.APIListener = func(_ int, ln net.Listener) net.Listener { return countingListener{ln, &reads} }
	c.Start(0)
	addr := c.Leader().APIAddr

	conn := h2Open(t, addr)
	const calls = 16
	var burst bytes.Buffer
	for i := range calls {
		stream := uint32(2*i + 1)
		h2Frame(&burst, 0x1, 0x4, stream, hpackLiteral(":method", "POST", ":scheme", "http", ":path", "/leasehold.v1.ClusterService/Members",
			":authority", addr, "content-type", "application/json", "authorization", "Bearer "+opsSecret)) // HEADERS, END_HEADERS
		h2Frame(&burst, 0x0, 0x1, stream, []byte("{}")) // DATA, END_STREAM
	}
	before := reads.Load()
	if _, err := conn.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	// Every call's answer ends its stream with a HEADERS (trailers) or
	// DATA frame flagged END_STREAM.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for ended := 0; ended < calls; {
		head := make([]byte, 9)
		if _, err := io.ReadFull(conn, head); err != nil {
			t.Fatalf("%d of %d calls answered: %v", ended, calls, err)
		}
		payload := make([]byte, int(head[0])<<16|int(head[1])<<8|int(head[2]))
		if _, err := io.ReadFull(conn, payload); err != nil {
			t.Fatalf("%d of %d calls answered: %v", ended, calls, err)
		}
		typ, flags, stream := head[3], head[4], binary.BigEndian.Uint32(head[5:])&0x7fffffff
		switch {
		case typ == 0x4 && flags&0x1 == 0:
			h2Frame(conn, 0x4, 0x1, 0, nil) // acknowledge the server's settings
		case stream != 0 && typ == 0x3:
			t.Fatalf("stream %d reset: %x", stream, payload)
		case stream != 0 && (typ == 0x0 || typ == 0x1) && flags&0x1 != 0:
			ended++
		}
	}
	// The reads counted include the one that waits for the next frame and
	// any of the preface and settings still unread when the count began:
	// 2 here, against 68 unbuffered (two for each of the 32 frames).
	if n := reads.Load() - before; n >= calls {
		t.Fatalf("the server made %d reads of the connection for %d frames sent at once, want fewer than %d", n, 2*calls, calls)
	}
}
