package api

import (
	"bytes"
	"io"
	"net/http/httptest"
	"testing"
)

// readsBody is a request body that counts the reads it answers and
// whether it was closed.
type readsBody struct {
	r      io.Reader
	reads  int
	closed bool
}

func (b *readsBody) Read(p []byte) (int, error) { b.reads++; return b.r.Read(p) }
func (b *readsBody) Close() error               { b.closed = true; return nil }

// A heartbeat stream's body is read through a buffer: Connect's two reads
// of a message (its prefix, then its body) cost one read of the request
// body, and a message that arrived with it costs none; the bytes are
// counted as they arrive, and closing the body closes the request's.
func TestStreamBodyReadThroughBuffer(t *testing.T) {
	s := &Server{limits: DefaultLimits()}
	msg := func(n int) []byte { return append([]byte{0, 0, 0, 0, byte(n)}, bytes.Repeat([]byte{'x'}, n)...) }
	wire := append(msg(50), msg(60)...)
	body := &readsBody{r: bytes.NewReader(wire)}
	r := httptest.NewRequest("POST", "/leasehold.v1.WorkerService/HeartbeatStream", nil)
	r.Body = body
	if _, err := s.limitBody(httptest.NewRecorder(), r); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{50, 60} {
		prefix := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, prefix); err != nil || int(prefix[4]) != n {
			t.Fatalf("prefix %v, %v; want a length of %d", prefix, err, n)
		}
		if _, err := io.CopyN(io.Discard, r.Body, int64(n)); err != nil {
			t.Fatal(err)
		}
	}
	if body.reads != 1 {
		t.Fatalf("two messages took %d reads of the request body, want 1", body.reads)
	}
	if got := s.bodies.raw.Load(); got != int64(len(wire)) {
		t.Fatalf("counted %d bytes, want %d", got, len(wire))
	}
	if err := r.Body.Close(); err != nil || !body.closed {
		t.Fatalf("close: %v, request body closed %v", err, body.closed)
	}
}
