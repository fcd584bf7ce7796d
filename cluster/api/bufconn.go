package api

import (
	"bufio"
	"net"
)

// readBufferSize is the read buffer of each plaintext API connection.
const readBufferSize = 4 << 10

// bufferedListener gives each connection it accepts a read buffer.
//
// net/http's HTTP/2 server reads its frames straight from the connection
// it is given: a frame's 9-byte header, then its payload, two reads each.
// Over TLS the connection is a *tls.Conn, which reads whole records into
// a buffer of its own; without TLS (h2c) every frame cost the server two
// system calls, and a unary call, a HEADERS and a DATA frame, four. Through
// a buffer one read takes whatever the peer has sent, all the frames of
// every stream on the connection that arrived together.
//
// It costs each open connection readBufferSize bytes (32 MiB at the
// default max_connections of 8,192). Only plaintext listeners use it.
type bufferedListener struct{ net.Listener }

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, readBufferSize)}, nil
}

// bufferedConn reads through its buffer. Everything else, deadlines and
// Close included, is its connection's: a deadline cuts a read that waits
// on the connection, and bytes that arrived before it are still read.
// A read at least as large as the buffer goes straight to the connection.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
