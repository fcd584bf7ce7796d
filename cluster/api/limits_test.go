package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/cluster/api"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// limitsCluster starts 3 nodes with tokens and the given limits.
func limitsCluster(t *testing.T, l api.Limits) *clustertest.Cluster {
	t.Helper()
	c := clustertest.Prepare(t, 3)
	c.API = func(_ int, o *api.Options) { o.Credentials, o.Limits = testCreds, l }
	for i := range c.Nodes {
		c.Start(i)
	}
	return c
}

// limitsNode starts one node with tokens and the given limits.
func limitsNode(t *testing.T, l api.Limits) *clustertest.Cluster {
	t.Helper()
	c := clustertest.Prepare(t, 1)
	c.API = func(_ int, o *api.Options) { o.Credentials, o.Limits = testCreds, l }
	c.Start(0)
	return c
}

// bomb is a gRPC-framed SubmitJob whose gzip-compressed message of about
// 400 KiB inflates to 400 MiB.
func bomb(t *testing.T) []byte {
	t.Helper()
	var z bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for range 400 {
		gz.Write(zeros)
	}
	gz.Close()
	frame := make([]byte, 5, 5+z.Len())
	frame[0] = 1 // compressed
	binary.BigEndian.PutUint32(frame[1:], uint32(z.Len()))
	return append(frame, z.Bytes()...)
}

func rawPost(t *testing.T, url string, body io.Reader, length int64, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

const submitPath = "/leasehold.v1.JobService/SubmitJob"

// grpcStatus is a gRPC answer's status code (in the trailers, or in the
// headers of an answer without a body).
func grpcStatus(resp *http.Response) string {
	if resp == nil {
		return "no answer"
	}
	if s := resp.Trailer.Get("Grpc-Status"); s != "" {
		return s
	}
	return resp.Header.Get("Grpc-Status")
}

func grpcHeaders(token string) map[string]string {
	h := map[string]string{"Content-Type": "application/grpc", "Grpc-Encoding": "gzip", "Te": "trailers"}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	return h
}

// A gzip bomb is never inflated past the bound: without a token it is
// refused before a byte of it is read; with one, inflation stops at the
// bound and the call is refused as too large.
func TestGzipBombRefused(t *testing.T) {
	c := limitsCluster(t, api.DefaultLimits())
	leader := c.Leader()
	url := "http://" + leader.APIAddr + submitPath
	body := bomb(t)

	resp, _ := rawPost(t, url, bytes.NewReader(body), int64(len(body)), grpcHeaders(""))
	if grpcStatus(resp) != fmt.Sprint(int(connect.CodeUnauthenticated)) {
		t.Fatalf("bomb without a token answered %v", resp)
	}
	if raw, inflated := leader.APIServer.BodyBytes(); raw != 0 || inflated != 0 {
		t.Fatalf("read %d raw and %d inflated bytes of an unauthenticated request", raw, inflated)
	}

	resp, _ = rawPost(t, url, bytes.NewReader(body), int64(len(body)), grpcHeaders(opsSecret))
	if grpcStatus(resp) != fmt.Sprint(int(connect.CodeResourceExhausted)) {
		t.Fatalf("bomb with a token answered %v", resp)
	}
	raw, inflated := leader.APIServer.BodyBytes()
	if limit := int64(api.DefaultLimits().MaxRequestBytes); inflated > limit+64<<10 || raw > int64(len(body)) {
		t.Fatalf("inflated %d bytes (bound %d), read %d raw", inflated, limit, raw)
	}
}

// A body larger than the bound is refused by its length before it is read,
// and one without a length is cut at the bound; a follower refuses it
// itself instead of forwarding it, and the leader reads nothing of it.
func TestOversizedBodyRefused(t *testing.T) {
	c := limitsCluster(t, api.DefaultLimits())
	leader := c.Leader()
	follower := c.Nodes[(leader.Index+1)%3]
	limit := int64(api.DefaultLimits().MaxRequestBytes)

	// 300 MiB announced: refused at once, nothing read.
	huge := io.LimitReader(zeroReader{}, 300<<20)
	resp, _ := rawPost(t, "http://"+follower.APIAddr+submitPath, huge, 300<<20, grpcHeaders(opsSecret))
	if resp != nil && grpcStatus(resp) != fmt.Sprint(int(connect.CodeResourceExhausted)) {
		t.Fatalf("300 MiB body answered %v", resp)
	}
	if raw, _ := follower.APIServer.BodyBytes(); raw > 64<<10 {
		t.Fatalf("read %d bytes of a body refused by its length", raw)
	}

	// A 128 MiB SubmitJob with no length, sent to a follower: cut at the
	// bound there, never forwarded.
	msg, _ := proto.Marshal(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "big", Queue: "q", Kind: "k", Payload: make([]byte, 128<<20)}})
	resp, _ = rawPost(t, "http://"+follower.APIAddr+submitPath, io.MultiReader(bytes.NewReader(frameOf(msg)), zeroReader{}), -1,
		map[string]string{"Content-Type": "application/grpc", "Te": "trailers", "Authorization": "Bearer " + opsSecret})
	if resp != nil && grpcStatus(resp) != fmt.Sprint(int(connect.CodeResourceExhausted)) {
		t.Fatalf("128 MiB submit answered %v", resp)
	}
	if raw, _ := follower.APIServer.BodyBytes(); raw > 64<<10+limit+8<<10 {
		t.Fatalf("the follower read %d bytes, bound %d", raw, limit)
	}
	if raw, _ := leader.APIServer.BodyBytes(); raw != 0 {
		t.Fatalf("the leader read %d bytes: the request was forwarded", raw)
	}
}

func frameOf(msg []byte) []byte {
	f := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(f[1:], uint32(len(msg)))
	return append(f, msg...)
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A credential over its rate is answered RATE_LIMITED with a retry-after
// hint; other credentials are not affected.
func TestRateLimitPerCredential(t *testing.T) {
	l := api.DefaultLimits()
	l.Rate, l.Burst = 1, 3
	c := limitsCluster(t, l)
	leader := c.Leader()
	cl := leaseholdv1connect.NewClusterServiceClient(http.DefaultClient, "http://"+leader.APIAddr, bearer(subSecret))
	var limited error
	for range 10 {
		if _, err := cl.Members(callCtx(t), connect.NewRequest(&pb.MembersRequest{})); err != nil {
			limited = err
			break
		}
	}
	d := transport.DetailOf(limited)
	if d.GetReason() != transport.ReasonRateLimited || d.GetRetryAfter().AsDuration() <= 0 {
		t.Fatalf("over the rate: %v (detail %+v)", limited, d)
	}
	ops := leaseholdv1connect.NewClusterServiceClient(http.DefaultClient, "http://"+leader.APIAddr, bearer(opsSecret))
	if _, err := ops.Members(callCtx(t), connect.NewRequest(&pb.MembersRequest{})); err != nil {
		t.Fatalf("another credential was limited too: %v", err)
	}
}

// Connections that send headers and never a body cannot take the API's
// file descriptors: each host has a bounded number of connections, a body
// that does not arrive in time ends its request, and callers from other
// hosts are served throughout.
func TestIdleConnectionsBounded(t *testing.T) {
	l := api.DefaultLimits()
	l.MaxConnsPerHost, l.BodyTimeout = 8, 300*time.Millisecond
	c := limitsCluster(t, l)
	leader := c.Leader()
	var conns []net.Conn
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	for range 20 {
		conn, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}).Dial("tcp", leader.APIAddr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", "/leasehold.v1.ClusterService/Members", opsSecret)
		conns = append(conns, conn)
	}
	// Another host is served while they hang.
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	cl := leaseholdv1connect.NewClusterServiceClient(other, "http://"+leader.APIAddr, bearer(opsSecret))
	if _, err := cl.Members(callCtx(t), connect.NewRequest(&pb.MembersRequest{})); err != nil {
		t.Fatalf("another host was refused: %v", err)
	}
	// Every hanging request ends: the 12 over the bound are closed at
	// once, the 8 within it when their body does not come, answered as a
	// refusal that names the bound (and no address).
	answered := 0
	for i, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(conn)
		if nerr, ok := err.(net.Error); ok && nerr.Timeout() {
			t.Fatalf("connection %d still open after 10s (read %q, open %d)", i, b, leader.APIServer.OpenConns())
		}
		if len(b) > 0 {
			answered++
			if !strings.Contains(string(b), "body_timeout") || !strings.Contains(string(b), "invalid_argument") || strings.Contains(string(b), "127.") {
				t.Fatalf("a hanging request answered %q", b)
			}
		}
	}
	if answered != 8 {
		t.Fatalf("%d hanging requests answered, want the 8 within the bound", answered)
	}
	c.WaitFor(10*time.Second, "the connections freed", func() bool {
		_, err := leaseholdv1connect.NewClusterServiceClient(http.DefaultClient, "http://"+leader.APIAddr, bearer(opsSecret)).
			Members(context.Background(), connect.NewRequest(&pb.MembersRequest{}))
		return err == nil
	})

}

// A client that asks for a large answer and never reads it holds its
// handler only until the write deadline: the connection is then closed.
func TestSlowReaderCutOff(t *testing.T) {
	l := api.DefaultLimits()
	l.WriteTimeout = 300 * time.Millisecond
	c := limitsNode(t, l)
	leader := c.Leader()
	jobs := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, "http://"+leader.APIAddr, bearer(opsSecret))
	for i := range 60 {
		_, err := jobs.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{
			Id: fmt.Sprint("big-", i), Queue: "q", Kind: "k", Payload: make([]byte, 200<<10)}}))
		if err != nil {
			t.Fatal(err)
		}
	}
	base := leader.APIServer.OpenConns()
	conn, err := net.Dial("tcp", leader.APIAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"queue":"q","pageSize":100}`
	fmt.Fprintf(conn, "POST /leasehold.v1.JobService/ListJobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		opsSecret, len(body), body)
	c.WaitFor(10*time.Second, "the connection accepted", func() bool { return leader.APIServer.OpenConns() > base })
	// The answer (about 16 MiB of JSON) is never read: the server's write
	// blocks, its deadline passes, and the connection is let go.
	c.WaitFor(10*time.Second, "the stalled connection closed by the server", func() bool {
		return leader.APIServer.OpenConns() <= base
	})

	// Over HTTP/2 the same call, whose client never grants the answer
	// flow-control credit past the first 64 KiB, is reset when the
	// stream's write deadline (the HTTP server's) passes.
	h2 := h2Open(t, leader.APIAddr)
	h2Frame(h2, 0x1, 0x4, 1, hpackLiteral(":method", "POST", ":scheme", "http", ":path", "/leasehold.v1.JobService/ListJobs",
		":authority", leader.APIAddr, "content-type", "application/json", "authorization", "Bearer "+opsSecret))
	h2Frame(h2, 0x0, 0x1, 1, []byte(body)) // DATA, END_STREAM
	if err := h2Await(h2, 10*time.Second, func(typ, _ byte, _ []byte) bool { return typ == 0x3 }); err != nil {
		t.Fatalf("HTTP/2: the unread answer's stream was not reset within 10s (write_timeout %s): %v", l.WriteTimeout, err)
	}
}

// write_timeout bounds a call's answer, not an event stream's: the server
// sets it on every request as it arrives, and the API lifts it for
// streams. A watch, over HTTP/1.1 and over HTTP/2, still delivers events
// long after the deadline would have passed.
func TestEventStreamOutlivesWriteTimeout(t *testing.T) {
	l := api.DefaultLimits()
	l.WriteTimeout = 200 * time.Millisecond
	c := limitsNode(t, l)
	base := "http://" + c.Leader().APIAddr
	jobs := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, base, bearer(opsSecret))
	for name, hc := range map[string]*http.Client{"HTTP/1.1": http.DefaultClient, "HTTP/2": h2c(t)} {
		events := leaseholdv1connect.NewEventServiceClient(hc, base)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		watch := connect.NewRequest(&pb.WatchEventsRequest{})
		watch.Header().Set("Authorization", "Bearer "+opsSecret)
		opened := time.Now()
		stream, err := events.WatchEvents(ctx, watch)
		if err != nil {
			t.Fatal(err)
		}
		// One job at a time, each event awaited, until the stream has run
		// five times the write timeout.
		for i := 0; time.Since(opened) < 5*l.WriteTimeout; i++ {
			id := fmt.Sprintf("%s-%d", name, i)
			if _, err := jobs.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: id, Queue: "q", Kind: "k"}})); err != nil {
				t.Fatal(err)
			}
			for seen := false; !seen; {
				if !stream.Receive() {
					t.Fatalf("%s: the watch ended %s after it opened, waiting for job %s: %v", name, time.Since(opened), id, stream.Err())
				}
				for _, ev := range stream.Msg().GetEvents() {
					seen = seen || ev.GetJobId() == id
				}
			}
		}
		cancel()
		stream.Close()
	}
}

// h2Open dials addr and opens an HTTP/2 connection without TLS: the
// client preface and empty settings. It is closed when the test ends.
func h2Open(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	h2Frame(conn, 0x4, 0, 0, nil) // SETTINGS
	return conn
}

// h2Frame writes one HTTP/2 frame.
func h2Frame(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	head := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(head[5:], stream)
	_, err := w.Write(append(head, payload...))
	return err
}

// hpackLiteral encodes headers as literals without indexing (no Huffman),
// each name and value shorter than 127 bytes.
func hpackLiteral(fields ...string) []byte {
	var b []byte
	for i := 0; i < len(fields); i += 2 {
		b = append(b, 0, byte(len(fields[i])))
		b = append(b, fields[i]...)
		b = append(b, byte(len(fields[i+1])))
		b = append(b, fields[i+1]...)
	}
	return b
}

// An HTTP/2 request that declares an empty body and never ends it holds
// its handler no longer than body_timeout: it is answered, as the body
// read fails, and not left waiting for a body that never comes.
func TestDeclaredEmptyBodyNeverEndedBounded(t *testing.T) {
	l := api.DefaultLimits()
	l.BodyTimeout = 300 * time.Millisecond
	c := limitsNode(t, l)
	addr := c.Leader().APIAddr
	conn := h2Open(t, addr)
	headers := hpackLiteral(":method", "POST", ":scheme", "http", ":path", "/leasehold.v1.ClusterService/Members",
		":authority", addr, "content-type", "application/json", "content-length", "0", "authorization", "Bearer "+opsSecret)
	h2Frame(conn, 0x1, 0x4, 1, headers) // HEADERS, END_HEADERS, not END_STREAM
	// The answer ends with a frame that ends the stream (or resets it);
	// its data is Connect's error, which names the bound.
	var answer []byte
	if err := h2Await(conn, 10*time.Second, func(typ, flags byte, payload []byte) bool {
		if typ == 0x0 {
			answer = append(answer, payload...)
		}
		return typ == 0x3 || (typ == 0x0 || typ == 0x1) && flags&0x1 != 0
	}); err != nil {
		t.Fatalf("no answer to a request whose declared empty body never ended, body_timeout %s: %v", l.BodyTimeout, err)
	}
	if !strings.Contains(string(answer), "invalid_argument") || !strings.Contains(string(answer), "body_timeout") {
		t.Fatalf("the cut request answered %q, want invalid_argument naming body_timeout", answer)
	}
	c.WaitFor(10*time.Second, "the cut body no longer timed", func() bool { return c.Leader().APIServer.ListedBodies() == 0 })
}

// An HTTP/2 body its handler never reads, refused before reading (an
// unknown content type), stops being timed when the handler returns: the
// server's watch keeps nothing of a call that has ended, and never cuts a
// stream whose handler is gone.
func TestUnreadBodyUntimedWhenItsHandlerReturns(t *testing.T) {
	l := api.DefaultLimits()
	l.BodyTimeout = time.Minute // the cut cannot be what unlists it
	c := limitsNode(t, l)
	n := c.Leader()
	conn := h2Open(t, n.APIAddr)
	headers := hpackLiteral(":method", "POST", ":scheme", "http", ":path", "/leasehold.v1.ClusterService/Members",
		":authority", n.APIAddr, "content-type", "text/plain", "authorization", "Bearer "+opsSecret)
	h2Frame(conn, 0x1, 0x4, 1, headers) // HEADERS, END_HEADERS, not END_STREAM
	if err := h2Await(conn, 10*time.Second, func(typ, _ byte, _ []byte) bool { return typ == 0x1 }); err != nil {
		t.Fatalf("no answer to a call of an unknown content type: %v", err)
	}
	c.WaitFor(10*time.Second, "the unread body no longer timed", func() bool { return n.APIServer.ListedBodies() == 0 })
}

// h2Await reads frames from an HTTP/2 connection, acknowledging the
// server's settings and never granting flow-control credit, until a frame
// of stream 1 satisfies done (given its type, flags and payload); an error
// when within does not see one.
func h2Await(conn net.Conn, within time.Duration, done func(typ, flags byte, payload []byte) bool) error {
	conn.SetReadDeadline(time.Now().Add(within))
	for {
		head := make([]byte, 9)
		if _, err := io.ReadFull(conn, head); err != nil {
			return err
		}
		payload := make([]byte, int(head[0])<<16|int(head[1])<<8|int(head[2]))
		if _, err := io.ReadFull(conn, payload); err != nil {
			return err
		}
		typ, flags, stream := head[3], head[4], binary.BigEndian.Uint32(head[5:])&0x7fffffff
		if typ == 0x4 && flags&0x1 == 0 {
			h2Frame(conn, 0x4, 0x1, 0, nil) // acknowledge the server's settings
		}
		if stream == 1 && done(typ, flags, payload) {
			return nil
		}
	}
}
