package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// envelope is a message with its prefix, as Connect frames it.
func envelope(msg []byte) []byte {
	out := make([]byte, envelopePrefix, envelopePrefix+len(msg))
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// bound is how long a test waits for what must happen at once before it
// says it did not (a bound against a hang, not a timing assertion).
const bound = 10 * time.Second

// A joined body returns each message whole from one Read, however the
// writer split it, and returns at its end without waiting for the next
// one: the writer sends the next only once the last was read.
func TestJoinedBodyReadsWholeMessages(t *testing.T) {
	pr, pw := io.Pipe()
	body := &joinedBody{body: pr}
	msgs := [][]byte{[]byte("abc"), {}, []byte(strings.Repeat("x", 100)), []byte("z")}
	read := make(chan struct{}, len(msgs)) // buffered: a writer still in its empty write of a message of no bytes is released by the next Read
	go func() {
		defer pw.Close()
		for _, m := range msgs {
			env := envelope(m)
			// As Connect writes it: the prefix, then the message.
			if _, err := pw.Write(env[:envelopePrefix]); err != nil {
				return
			}
			if _, err := pw.Write(env[envelopePrefix:]); err != nil {
				return
			}
			select {
			case <-read:
			case <-time.After(bound):
				pw.CloseWithError(io.ErrUnexpectedEOF)
				return
			}
		}
	}()
	defer pr.Close()
	buf := make([]byte, 64)
	readOne := func() ([]byte, error) {
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			n, err := body.Read(buf)
			done <- result{n, err}
		}()
		select {
		case r := <-done:
			return buf[:r.n], r.err
		case <-time.After(bound):
			t.Fatal("Read waited past the end of a message")
			return nil, nil
		}
	}
	for i, m := range msgs {
		want := envelope(m)
		var got []byte
		for len(got) < len(want) {
			b, err := readOne()
			if err != nil {
				t.Fatalf("message %d: %v after %d bytes", i, err, len(got))
			}
			if len(got) == 0 && len(want) <= len(buf) && len(b) != len(want) {
				t.Fatalf("message %d: a read of %d bytes, want the whole %d", i, len(b), len(want))
			}
			got = append(got, b...)
		}
		if string(got) != string(want) {
			t.Fatalf("message %d: read %q, want %q", i, got, want)
		}
		read <- struct{}{}
	}
	if b, err := readOne(); len(b) != 0 || err != io.EOF {
		t.Fatalf("after the last message: %d bytes, %v; want 0, EOF", len(b), err)
	}
}

// A body that ends inside a message returns what it read with the error.
func TestJoinedBodyShortMessage(t *testing.T) {
	env := envelope([]byte("hello"))
	body := &joinedBody{body: io.NopCloser(strings.NewReader(string(env[:7])))}
	b, err := io.ReadAll(body)
	if err != nil || string(b) != string(env[:7]) {
		t.Fatalf("read %q, %v; want %q", b, err, env[:7])
	}
}

// recorder is a transport that reads a request's body as Go's HTTP/2
// transport does (each read a DATA frame) and records the reads' sizes.
type recorder struct {
	mu     sync.Mutex
	bodies []io.ReadCloser
	reads  []int
	done   chan struct{} // closed when the streamed body has ended
	resp   *io.PipeWriter
}

// recordingClient is a Client whose calls go to a new recorder; it is
// closed when the test ends.
func recordingClient(t *testing.T) (*recorder, *Client) {
	t.Helper()
	rec := &recorder{done: make(chan struct{})}
	c, err := New(Config{Endpoints: []string{"127.0.0.1:1"}, HTTPClient: &http.Client{Transport: rec}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return rec, c
}

// end closes stream, whose body the recorder reads, and returns the sizes
// of the reads it made of it.
func (r *recorder) end(t *testing.T, stream *connect.BidiStreamForClient[leaseholdv1.HeartbeatStreamRequest, leaseholdv1.HeartbeatStreamResponse]) []int {
	t.Helper()
	if err := stream.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	case <-time.After(bound):
		t.Fatal("the stream's body did not end")
	}
	r.mu.Lock()
	reads := r.reads
	r.resp.Close()
	r.mu.Unlock()
	_ = stream.CloseResponse()
	return reads
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.bodies = append(r.bodies, req.Body)
	r.mu.Unlock()
	if !strings.HasPrefix(req.Header.Get("Content-Type"), "application/connect+") {
		return &http.Response{StatusCode: http.StatusNotImplemented, Body: http.NoBody, Request: req}, nil
	}
	pr, pw := io.Pipe()
	r.mu.Lock()
	r.resp = pw
	r.mu.Unlock()
	go func() {
		defer close(r.done)
		buf := make([]byte, 16<<10)
		for {
			n, err := req.Body.Read(buf)
			if n > 0 {
				r.mu.Lock()
				r.reads = append(r.reads, n)
				r.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	h := http.Header{}
	h.Set("Content-Type", req.Header.Get("Content-Type"))
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Body: pr, Request: req}, nil
}

// A Client's streams reach its transport one read per message; its unary
// calls reach it untouched.
func TestStreamMessagesLeaveWhole(t *testing.T) {
	rec, c := recordingClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	workers := leaseholdv1connect.NewWorkerServiceClient(c.http, "http://127.0.0.1:1")

	stream := workers.HeartbeatStream(ctx)
	var want []int
	for i, id := range []string{"w1", "worker-two", "w3"} {
		req := &leaseholdv1.HeartbeatStreamRequest{Seq: uint64(i + 1), Heartbeat: &leaseholdv1.HeartbeatRequest{WorkerId: id}}
		if err := stream.Send(req); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		want = append(want, envelopePrefix+proto.Size(req))
	}
	reads := rec.end(t, stream)
	if len(reads) != len(want) {
		t.Fatalf("the transport read the stream's body in %v, want one read a message: %v", reads, want)
	}
	for i := range want {
		if reads[i] != want[i] {
			t.Fatalf("the transport read the stream's body in %v, want %v", reads, want)
		}
	}

	// A unary call's body goes to the transport as it was.
	_, _ = workers.RegisterWorker(ctx, connect.NewRequest(&leaseholdv1.RegisterWorkerRequest{WorkerId: "w1"}))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if last := rec.bodies[len(rec.bodies)-1]; last == nil {
		t.Fatal("the unary call sent no body")
	} else if _, joined := last.(*joinedBody); joined {
		t.Fatal("the unary call's body was wrapped")
	}
}

// Messages announced before they are sent (a heartbeat stream several
// workers share) leave in one read, and so one DATA frame, while each is
// announced; the read ends with the last announced one, without waiting
// for a message nobody announced.
func TestAnnouncedMessagesLeaveTogether(t *testing.T) {
	rec, c := recordingClient(t)
	var announced atomic.Int64
	ctx, cancel := context.WithCancel(withAnnounced(context.Background(), &announced))
	defer cancel()
	stream := leaseholdv1connect.NewWorkerServiceClient(c.http, "http://127.0.0.1:1").HeartbeatStream(ctx)
	send := func(i int) int {
		t.Helper()
		req := &leaseholdv1.HeartbeatStreamRequest{Seq: uint64(i), Heartbeat: &leaseholdv1.HeartbeatRequest{WorkerId: fmt.Sprintf("w%d", i)}}
		if err := stream.Send(req); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		return envelopePrefix + proto.Size(req)
	}
	// Three announced, sent one after another (a send returns once its
	// message is read): one read. Then one announced alone, after the
	// third was read: a read of its own (the first read joins only the two
	// announced when its first message ended), which ends at once though
	// no other message follows.
	announced.Add(3)
	together := send(1) + send(2) + send(3)
	announced.Add(1)
	alone := send(4)
	reads := rec.end(t, stream)
	if len(reads) != 2 || reads[0] != together || reads[1] != alone {
		t.Fatalf("the transport read %v, want [%d %d]: three announced messages in one read, then one", reads, together, alone)
	}
	if n := announced.Load(); n != 0 {
		t.Fatalf("%d messages still announced after all were read", n)
	}
}

// A message that ends exactly where the read's buffer does is taken off the
// announced count like any other: left counted, it would make every later
// read wait for a message nobody sends.
func TestAnnouncedMessageFillingTheBuffer(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	var announced atomic.Int64
	announced.Add(2)
	body := &joinedBody{body: pr, announced: &announced}
	first, second := envelope([]byte("first")), envelope([]byte("second"))
	go func() {
		for _, m := range [][]byte{first, second} {
			if _, err := pw.Write(m); err != nil {
				return
			}
		}
	}()
	if n, err := body.Read(make([]byte, len(first))); n != len(first) || err != nil {
		t.Fatalf("first read: %d, %v; want the first message, %d bytes", n, err, len(first))
	}
	if n := announced.Load(); n != 1 {
		t.Fatalf("%d announced after the first message filled the buffer, want 1", n)
	}
	done := make(chan int, 1)
	go func() {
		n, _ := body.Read(make([]byte, 64))
		done <- n
	}()
	select {
	case n := <-done:
		if n != len(second) {
			t.Fatalf("second read: %d bytes, want %d", n, len(second))
		}
	case <-time.After(bound):
		pw.Close()
		t.Fatal("the read after the last announced message waited for one more")
	}
	if n := announced.Load(); n != 0 {
		t.Fatalf("%d announced after both were read", n)
	}
}

// A read joins only the messages announced when its first one ended:
// senders that announce later wait for the next read, so a read never
// holds a message for a sender that was not yet handing one over. It
// stops too when no room is left, and every message is taken off the
// count whatever it decides.
func TestAnnouncedJoinIsBounded(t *testing.T) {
	var announced atomic.Int64
	b := &joinedBody{announced: &announced}
	announced.Store(3) // the first message and two more
	budget := -1
	if !b.join(&budget, true) || budget != 1 {
		t.Fatalf("the first message's end, two more announced: join=false or budget %d, want 1", budget)
	}
	announced.Add(5) // latecomers
	if !b.join(&budget, true) {
		t.Fatal("the second announced message was not joined")
	}
	if b.join(&budget, true) {
		t.Fatal("the read went on past the messages announced at its first end")
	}
	if n := announced.Load(); n != 5 {
		t.Fatalf("%d announced left, want the 5 latecomers", n)
	}
	budget = -1
	if b.join(&budget, false) {
		t.Fatal("joined with no room")
	}
	if n := announced.Load(); n != 4 {
		t.Fatalf("a message ended without room was not taken off the count: %d left, want 4", n)
	}
}

// Only the binary enveloped content types are joined.
func TestEnvelopedContentTypes(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/connect+proto":      true,
		"application/connect+json":       true,
		"application/grpc":               true,
		"application/grpc+proto":         true,
		"application/grpc-web":           true,
		"application/grpc-web+proto":     true,
		"application/grpc-web-text":      false,
		"application/grpc-web-text+prot": false,
		"application/grpcx":              false,
		"application/proto":              false,
		"application/json":               false,
		"":                               false,
	} {
		if got := enveloped(ct); got != want {
			t.Errorf("enveloped(%q) = %v, want %v", ct, got, want)
		}
	}
}

// A prefix with a flag no envelope carries is not an envelope: the body
// is passed through as it is read, and no read waits for the length it
// seems to give.
func TestJoinedBodyPassesThroughWhatIsNotAnEnvelope(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	body := &joinedBody{body: pr}
	next := make(chan struct{}, 3) // the writer writes a piece once the last was read
	defer close(next)
	go func() {
		defer pw.Close()
		for _, w := range []string{"\x40\xff\xff\xff\xff", "abc", "\x00\x00\x00\x00\x07"} {
			if _, err := pw.Write([]byte(w)); err != nil {
				return
			}
			if _, ok := <-next; !ok {
				return
			}
		}
	}()
	buf := make([]byte, 64)
	var got []byte
	for range 3 {
		done := make(chan int, 1)
		go func() {
			n, _ := body.Read(buf)
			done <- n
		}()
		select {
		case n := <-done:
			got = append(got, buf[:n]...)
			next <- struct{}{}
		case <-time.After(bound):
			t.Fatalf("a read waited for the length of what is not an envelope, after %q", got)
		}
	}
	if want := "\x40\xff\xff\xff\xffabc\x00\x00\x00\x00\x07"; string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}
