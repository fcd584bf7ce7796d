package api

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Limits bound what callers can make a node do. They are per node: a
// credential that spreads its calls over three nodes gets three times the
// rate. A zero field is no bound; Options without Limits get
// DefaultLimits. Validate names a bad field.
type Limits struct {
	// MaxRequestBytes bounds one request message, counted decompressed.
	// A larger body is refused before it is read (by its Content-Length)
	// or as soon as it passes the bound; a compressed one is inflated no
	// further than the bound. Snapshot restores are bounded separately
	// (MaxSnapshotBytes).
	MaxRequestBytes int
	// MaxConns bounds the API connections open at once, MaxConnsPerHost
	// those from one source address.
	MaxConns        int
	MaxConnsPerHost int
	// Rate (requests per second) and Burst bound each credential's calls.
	// Open mode (no credentials configured) is not rate limited.
	Rate  float64
	Burst int
	// BodyTimeout bounds reading a request's body; HeaderTimeout its
	// headers; IdleTimeout an idle keep-alive connection. WriteTimeout
	// bounds a call's whole answer (a long poll waits at most MaxWait
	// within it); streams and snapshots are not bounded by it.
	BodyTimeout   time.Duration
	HeaderTimeout time.Duration
	IdleTimeout   time.Duration
	WriteTimeout  time.Duration
}

// DefaultLimits are generous for real workloads (a worker token shared by
// thousands of workers heartbeating every 10 s stays far under the rate)
// and small enough that one careless client cannot take a node down.
func DefaultLimits() Limits {
	return Limits{
		MaxRequestBytes: 1 << 20,
		MaxConns:        8192,
		MaxConnsPerHost: 1024,
		Rate:            5000,
		Burst:           10000,
		BodyTimeout:     30 * time.Second,
		HeaderTimeout:   10 * time.Second,
		IdleTimeout:     2 * time.Minute,
		WriteTimeout:    MaxWait + 30*time.Second,
	}
}

// unboundedWrites are the paths whose answers may take as long as they
// need: an event stream, a heartbeat stream, a snapshot, a heap dump. (A profile or a
// trace sets its own: write_timeout plus its length, net/http/pprof's.)
var unboundedWrites = map[string]bool{
	"/leasehold.v1.EventService/WatchEvents":      true,
	"/leasehold.v1.WorkerService/HeartbeatStream": true,
	"/v1/snapshot":    true,
	"/debug/heapdump": true,
}

// bodyStreams are the paths whose request body is a stream of messages that
// never ends: neither body_timeout nor max_request_bytes bounds the body
// as a whole. Each message is bounded on its own (heartbeatStreamHandler),
// and a stream with no message for a while is ended (Server.streamIdle).
var bodyStreams = map[string]bool{
	"/leasehold.v1.WorkerService/HeartbeatStream": true,
}

// Validate checks the limits; it names the field.
func (l Limits) Validate() error {
	switch {
	case l.MaxRequestBytes < 0 || l.MaxRequestBytes > 0 && l.MaxRequestBytes < fsm.MaxPayloadLen+64<<10:
		return fmt.Errorf("limits.max_request_bytes = %d: at least %d (a job's payload and its fields)", l.MaxRequestBytes, fsm.MaxPayloadLen+64<<10)
	case l.MaxConns < 0 || l.MaxConnsPerHost < 0:
		return fmt.Errorf("limits.max_connections = %d, max_connections_per_host = %d: must not be negative", l.MaxConns, l.MaxConnsPerHost)
	case l.MaxConns > 0 && l.MaxConnsPerHost > l.MaxConns:
		return fmt.Errorf("limits.max_connections_per_host = %d: must not exceed max_connections (%d)", l.MaxConnsPerHost, l.MaxConns)
	case l.Rate < 0 || l.Burst < 0:
		return fmt.Errorf("limits.rate_per_credential = %g, burst_per_credential = %d: must not be negative", l.Rate, l.Burst)
	case l.BodyTimeout < 0 || l.HeaderTimeout < 0 || l.IdleTimeout < 0 || l.WriteTimeout < 0:
		return errors.New("limits: timeouts must not be negative")
	case l.WriteTimeout > 0 && l.WriteTimeout <= MaxWait:
		return fmt.Errorf("limits.write_timeout = %s: must exceed the longest long poll (%s)", l.WriteTimeout, MaxWait)
	}
	return nil
}

// bodyBytes counts what the API read of request bodies: raw bytes off the
// wire, and bytes inflated from compressed messages. Tests use them to
// prove nothing past a bound was read.
type bodyBytes struct {
	raw, inflated atomic.Int64
}

// BodyBytes reports the request body bytes this server has read off the
// wire (raw) and inflated from compressed messages (inflated).
func (s *Server) BodyBytes() (raw, inflated int64) {
	return s.bodies.raw.Load(), s.bodies.inflated.Load()
}

// OpenConns is the number of API connections open now.
func (s *Server) OpenConns() int { return s.conns.Open() }

// limitBody bounds and times one request: a Content-Length over the
// bound is refused before anything is read, the body is cut at the bound
// plus a margin for framing, and reading it must finish within
// BodyTimeout. The answer must be written within WriteTimeout: the HTTP
// server sets that deadline as each request arrives (Serve), and
// limitBody lifts it for the paths it does not bound.
//
// On HTTP/2 the body's deadline is kept by the server's bodyWatch, not
// the stream's own timer: every deadline set on a stream is a hand-off to
// its connection's serving goroutine, so a unary call over HTTP/2 now has
// none. limitBody returns the body the watch lists, which the caller
// unlists when its handler returns (nil when none is listed).
func (s *Server) limitBody(w http.ResponseWriter, r *http.Request) (*countedBody, error) {
	if s.limits.WriteTimeout > 0 && unboundedWrites[r.URL.Path] {
		http.NewResponseController(w).SetWriteDeadline(time.Time{})
	}
	if r.URL.Path == "/v1/snapshot" {
		return nil, nil // bounded by MaxSnapshotBytes, admin only
	}
	if bodyStreams[r.URL.Path] {
		counted := &countedBody{ReadCloser: r.Body, n: &s.bodies.raw}
		r.Body = &bufferedBody{Reader: bufio.NewReaderSize(counted, streamReadBuffer), Closer: counted}
		return nil, nil
	}
	if r.Body == http.NoBody {
		// An HTTP/1.1 request without a body (a GET): nothing to read,
		// and a read deadline would stay on the connection; when it
		// passed, the server's read that watches for a closed connection
		// would fail and end the request, so a profile longer than
		// body_timeout was cut short. Not a declared length of 0: over
		// HTTP/2 such a body may still never end, and it is bounded as
		// any other.
		return nil, nil
	}
	var body io.ReadCloser = r.Body
	if s.limits.MaxRequestBytes > 0 {
		max := int64(s.limits.MaxRequestBytes) + 4<<10 // the envelope's framing
		if r.ContentLength > max {
			return nil, tooLarge(r.ContentLength, s.limits.MaxRequestBytes)
		}
		body = http.MaxBytesReader(w, r.Body, max)
	}
	counted := &countedBody{ReadCloser: body, n: &s.bodies.raw, timeout: s.limits.BodyTimeout}
	r.Body = counted
	if r.ProtoMajor == 1 {
		// A body cut short leaves the connection without a next request
		// boundary: close it after the answer instead of keeping it idle.
		counted.w = w
		if s.limits.BodyTimeout > 0 {
			// Lifted once the body is read: it is the connection's, and
			// a long poll runs on.
			counted.rc = http.NewResponseController(w)
			counted.rc.SetReadDeadline(time.Now().Add(s.limits.BodyTimeout))
		}
		return nil, nil
	}
	if s.watch == nil {
		return nil, nil // body_timeout 0: not timed
	}
	counted.watch = s.watch
	s.watch.add(counted, w)
	return counted, nil
}

func tooLarge(n int64, max int) error {
	return fmt.Errorf("%w: request: %d bytes exceeds %d", fsm.ErrTooLarge, n, max)
}

// streamReadBuffer is a body stream's read buffer. Connect reads each
// message in two reads, its 5-byte prefix and then its body, and on
// HTTP/2 every read of a request body is a hand-off to the connection's
// serving goroutine (to return flow-control credit): through the buffer,
// one read takes the whole message, and every message that has arrived
// with it. A beat with ten leases is about 400 bytes.
const streamReadBuffer = 1 << 10

// bufferedBody is a request body read through a buffer; closing it closes
// the body.
type bufferedBody struct {
	*bufio.Reader
	io.Closer
}

// countedBody counts what is read and, when the body has ended, lifts an
// HTTP/1.1 body's read deadline (only then: after a failed read the
// deadline must stay, or the server's own draining of the rest would wait
// for ever) or takes an HTTP/2 body off the watch (after a failed read
// too: there is nothing more to time).
type countedBody struct {
	io.ReadCloser
	timeout time.Duration
	n       *atomic.Int64
	// rc, when set, has a read deadline on the body that the end of the
	// body lifts; w, when set (HTTP/1.1), gets "Connection: close" when the
	// body fails. Fields rather than closures: every call reads a body.
	rc   *http.ResponseController
	w    http.ResponseWriter
	once sync.Once
	// watch, when set (HTTP/2), lists the body until it ends (bodyWatch):
	// stream is the writer whose read deadline a cut sets, due the watch's
	// time it is cut at, prev, next and listed its place on the list
	// (guarded by the watch's lock).
	watch      *bodyWatch
	stream     http.ResponseWriter
	due        time.Duration
	prev, next *countedBody
	listed     bool
}

// read lifts the body's read deadline: it is all read.
func (b *countedBody) read() { b.rc.SetReadDeadline(time.Time{}) }

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	if err == io.EOF && b.rc != nil {
		b.once.Do(b.read)
	}
	if err != nil && b.watch != nil {
		b.watch.remove(b) // ended, or failed: nothing more to time
	}
	if err != nil && err != io.EOF {
		if b.w != nil {
			b.w.Header().Set("Connection", "close")
		}
		var mb *http.MaxBytesError
		switch {
		case errors.As(err, &mb):
			err = toWire(fmt.Errorf("%w: request: more than %d bytes", fsm.ErrTooLarge, mb.Limit))
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Nothing was done: a refusal, not an outcome unknown, and no
			// addresses in the message.
			err = toWire(fmt.Errorf("%w: request: the body did not arrive within %s (body_timeout)", fsm.ErrInvalidArgument, b.timeout))
		}
	}
	return n, err
}

// gzipBounded is the API's gzip decompressor: it stops inflating one
// message past the bound, so a small compressed body cannot make the node
// inflate (or even count) gigabytes, and its refusal names the reason.
type gzipBounded struct {
	s   *Server
	gz  *gzip.Reader
	src io.Reader
	n   int64
}

func (s *Server) newDecompressor() connect.Decompressor { return &gzipBounded{s: s} }

func (d *gzipBounded) Read(p []byte) (int, error) {
	if d.gz == nil {
		gz, err := gzip.NewReader(d.src)
		if err != nil {
			return 0, err
		}
		d.gz = gz
	}
	max := int64(d.s.limits.MaxRequestBytes)
	if max <= 0 {
		n, err := d.gz.Read(p)
		d.s.bodies.inflated.Add(int64(n))
		return n, err
	}
	if d.n > max {
		return 0, toWire(tooLarge(d.n, d.s.limits.MaxRequestBytes))
	}
	if rest := max + 1 - d.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := d.gz.Read(p)
	d.n += int64(n)
	d.s.bodies.inflated.Add(int64(n))
	return n, err
}

func (d *gzipBounded) Reset(r io.Reader) error {
	d.src, d.n = r, 0
	if d.gz != nil {
		return d.gz.Reset(r)
	}
	return nil
}

func (d *gzipBounded) Close() error {
	if d.gz != nil {
		return d.gz.Close()
	}
	return nil
}

// rates keeps one token bucket per credential.
type rates struct {
	mu      sync.Mutex
	limit   rate.Limit
	burst   int
	buckets map[string]*rate.Limiter
}

func newRates(l Limits) *rates {
	if l.Rate <= 0 {
		return nil // no rate limit
	}
	return &rates{limit: rate.Limit(l.Rate), burst: max(l.Burst, 1), buckets: map[string]*rate.Limiter{}}
}

// take spends one request of id's budget, or says how long to wait.
func (r *rates) take(id Identity, now time.Time) (ok bool, retryAfter time.Duration) {
	return spend(r.bucket(id), now)
}

// bucket returns id's token bucket; nil when id is not rate limited.
func (r *rates) bucket(id Identity) *rate.Limiter {
	if r == nil || id.Kind == "open" || id.Kind == "" {
		return nil
	}
	key := id.Kind + ":" + id.Name
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[key]
	if b == nil {
		// One bucket per configured credential: the map is bounded by the
		// configuration, not by callers.
		b = rate.NewLimiter(r.limit, r.burst)
		r.buckets[key] = b
	}
	return b
}

// spend takes one request from b (nil: no limit), or says how long to
// wait.
func spend(b *rate.Limiter, now time.Time) (ok bool, retryAfter time.Duration) {
	if b == nil {
		return true, 0
	}
	res := b.ReserveN(now, 1)
	if !res.OK() {
		return false, time.Second
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// rateLimited is the refusal of a call over its credential's rate.
func rateLimited(retryAfter time.Duration) error {
	d := &pb.ErrorDetail{RetryAfter: durationpb.New(retryAfter)}
	cerr := transport.NewError(transport.ReasonRateLimited, errRateLimited, d)
	cerr.Meta().Set("Retry-After", fmt.Sprint(int(retryAfter.Seconds()+0.999)))
	return cerr
}
