package client

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/transport"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// Client calls a leasehold cluster. It is safe for concurrent use; every
// method retries by itself where a retry is safe (see the package doc).
type Client struct {
	cfg    Config
	scheme string
	http   *http.Client
	owned  *http.Transport // the transport New built, closed by Close

	// closed ends every call in flight when Close is called.
	closed    context.Context
	closeFunc context.CancelFunc

	// nextRefused is when a server last refused ReportRequest.next (unix
	// nanoseconds; zero: never): reports go without it for nextRetry.
	nextRefused atomic.Int64

	// now is time.Now; a test moves it to step the members refresh limit.
	now func() time.Time

	// mu guards the pin and what may be pinned: current is always a
	// configured endpoint or in members (see hints.go). mu is never held
	// across a network call.
	mu      sync.Mutex
	current string                // the endpoint calls go to
	next    int                   // rotation position in cfg.Endpoints
	stubs   map[string]*endpoints // generated clients per endpoint
	members map[string]bool       // API addresses the cluster listed last
	listed  time.Time             // when the last members refresh ended; zero: never
	listing chan struct{}         // closed when the refresh in flight ends; nil: none
}

// endpoints holds the generated clients of one node.
type endpoints struct {
	addr    string
	jobs    jobsAPI
	workers workersAPI
	events  eventsAPI
	cluster clusterAPI
	queues  queuesAPI

	// schedules is the schedule service's (schedules.go).
	schedules schedulesAPI
}

// New returns a client for the cluster cfg names. It does not connect:
// the first call does.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:     cfg,
		scheme:  "http",
		now:     time.Now,
		current: cfg.Endpoints[0],
		stubs:   make(map[string]*endpoints),
	}
	if cfg.TLS != nil {
		c.scheme = "https"
	}
	if cfg.HTTPClient != nil {
		c.http = withJoinedFrames(cfg.HTTPClient)
	} else {
		c.owned = NewTransport(cfg.TLS)
		c.http = withJoinedFrames(&http.Client{Transport: c.owned})
	}
	c.closed, c.closeFunc = context.WithCancel(context.Background())
	return c, nil
}

// NewTransport is the transport a Client makes for itself when
// Config.HTTPClient is nil: HTTP/2 (h2c without TLS: the API serves it),
// so the long poll, the heartbeat and the reports of a worker, or the
// calls of many goroutines, share one connection per node instead of
// opening one each. Callers that wrap the transport (to count or trace
// requests) start from it.
func NewTransport(tlsConfig *tls.Config) *http.Transport {
	protocols := new(http.Protocols)
	if tlsConfig == nil {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP2(true)
		protocols.SetHTTP1(true)
	}
	return &http.Transport{
		Protocols:           protocols,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConfig,
		ForceAttemptHTTP2:   tlsConfig != nil,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
		// A restore sends "Expect: 100-continue", so a node that refuses
		// it (not the leader) answers before the snapshot is sent and the
		// client can retry elsewhere with the reader untouched.
		ExpectContinueTimeout: time.Second,
	}
}

// Close ends every call in flight and releases idle connections. The
// Client must not be used afterwards.
func (c *Client) Close() {
	c.closeFunc()
	if c.owned != nil {
		c.owned.CloseIdleConnections()
	}
}

// Leader returns the endpoint calls go to: the leader as last heard, or the
// endpoint the client is trying.
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

// target returns the current endpoint's generated clients.
func (c *Client) target() *endpoints {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stubsLocked(c.current)
}

// stubsLocked returns addr's generated clients, made on first use.
func (c *Client) stubsLocked(addr string) *endpoints {
	if s, ok := c.stubs[addr]; ok {
		return s
	}
	base := c.scheme + "://" + addr
	s := &endpoints{
		addr:    addr,
		jobs:    leaseholdv1connect.NewJobServiceClient(c.http, base),
		workers: leaseholdv1connect.NewWorkerServiceClient(c.http, base),
		events:  leaseholdv1connect.NewEventServiceClient(c.http, base),
		cluster: leaseholdv1connect.NewClusterServiceClient(c.http, base),
		queues:  leaseholdv1connect.NewQueueServiceClient(c.http, base),
	}
	s.schedules = leaseholdv1connect.NewScheduleServiceClient(c.http, base)
	c.stubs[addr] = s
	return s
}

// rotate moves off failed, to the endpoint after it in Endpoints (or after
// the last one tried, when failed was a member outside the list). If
// another call already moved the pin, it is left where it is.
func (c *Client) rotate(failed string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != failed {
		return
	}
	i := slices.Index(c.cfg.Endpoints, failed)
	if i < 0 {
		i = c.next
	}
	c.next = (i + 1) % len(c.cfg.Endpoints)
	c.current = c.cfg.Endpoints[c.next]
}

func (c *Client) authorize(hdr http.Header) {
	if c.cfg.Token != "" {
		hdr.Set(transport.HeaderAuthorization, "Bearer "+c.cfg.Token)
	}
}

// callOpts shape one call.
type callOpts struct {
	// wait is the server-side wait of a long poll, added to the timeouts.
	wait time.Duration
	// attempt, when set, bounds each attempt instead of CallTimeout.
	attempt time.Duration
	// once: a single attempt on the current endpoint (Status).
	once bool
	// noAttemptTimeout: the attempt may take as long as the caller's
	// context allows (snapshots).
	noAttemptTimeout bool
}

// unboundedKey marks a context whose call may retry for as long as the
// context lives even without a deadline; the worker runtime's loops use it.
type unboundedKey struct{}

func unbounded(ctx context.Context) context.Context {
	return context.WithValue(ctx, unboundedKey{}, true)
}

// attemptFunc makes one attempt on ep and returns the response headers it
// got (nil if none) and its error.
type attemptFunc func(ctx context.Context, ep *endpoints) (http.Header, error)

// maxRedirects bounds NOT_LEADER hops taken without a pause, so two nodes
// naming each other cannot spin the client.
const maxRedirects = 4

// call runs attempt until it succeeds, fails in a way a retry cannot fix,
// or ctx ends. See the package doc for which failures are retried.
func (c *Client) call(ctx context.Context, o callOpts, attempt attemptFunc) error {
	if c.closed.Err() != nil {
		return ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.closed, cancel)
	defer stop()
	if _, ok := ctx.Deadline(); !ok && ctx.Value(unboundedKey{}) == nil && !o.noAttemptTimeout {
		var tcancel context.CancelFunc
		ctx, tcancel = context.WithTimeout(ctx, c.cfg.CallTimeout+o.wait)
		defer tcancel()
	}
	var last error
	redirects := 0
	for n := 0; ; {
		ep := c.target()
		actx, acancel := ctx, context.CancelFunc(func() {})
		if !o.noAttemptTimeout {
			per := c.cfg.CallTimeout
			if o.attempt > 0 {
				per = o.attempt
			}
			actx, acancel = context.WithTimeout(ctx, per+o.wait)
		}
		hdr, err := attempt(actx, ep)
		acancel()
		c.follow(ctx, hdr)
		if err == nil {
			return nil
		}
		if c.closed.Err() != nil {
			return ErrClosed
		}
		e := toError(err)
		if ctx.Err() != nil {
			if errors.Is(e, ctx.Err()) {
				return ctxError(ctx, last)
			}
			return ctxError(ctx, e)
		}
		var perm *permanentError
		if o.once || errors.As(err, &perm) {
			return e
		}
		last = e
		if classify(e) == giveUp {
			return e
		}
		if c.steer(ctx, ep.addr, e, &redirects) {
			continue
		}
		if !c.sleep(ctx, n, e.RetryAfter) {
			if c.closed.Err() != nil {
				return ErrClosed
			}
			return ctxError(ctx, last)
		}
		n++
	}
}

// steer moves the pin after a retryable failure on ep and says whether to
// try again at once: a leader hint the client may follow (see admit) is
// followed without a pause, up to maxRedirects hops in a row; anything
// else, an ignored hint too, moves to the next endpoint and waits for a
// backoff.
func (c *Client) steer(ctx context.Context, ep string, e *Error, redirects *int) (now bool) {
	if classify(e) == redirect && e.LeaderAPI != ep && c.admit(ctx, e.LeaderAPI) && c.pin(e.LeaderAPI) {
		if *redirects < maxRedirects {
			*redirects++
			return true
		}
	} else {
		c.rotate(ep)
	}
	*redirects = 0
	return false
}

// permanentError marks an attempt's failure as final whatever its code: a
// snapshot that was partly written or read cannot be sent again.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// backoff is the n-th wait: uniform in [0, min(RetryMax, RetryBase×2^n)].
func (c *Client) backoff(n int) time.Duration {
	ceil := c.cfg.RetryMax
	if n < 32 {
		if d := c.cfg.RetryBase << n; d > 0 && d < ceil {
			ceil = d
		}
	}
	if ceil <= 0 {
		return 0
	}
	return rand.N(ceil + 1)
}

// sleep waits for the n-th backoff, and at least floor (a server's
// retry-after hint); false if ctx ended first.
func (c *Client) sleep(ctx context.Context, n int, floor time.Duration) bool {
	t := time.NewTimer(max(c.backoff(n), floor))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// unary makes a call through one of the generated clients: svc picks the
// service of an endpoint, method is a method expression of its interface
// (leaseholdv1connect.JobServiceClient.GetJob).
func unary[S, Req, Res any](ctx context.Context, c *Client, o callOpts, req *Req,
	svc func(*endpoints) S, method func(S, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*Res, error) {
	var out *Res
	err := c.call(ctx, o, func(ctx context.Context, ep *endpoints) (http.Header, error) {
		creq := connect.NewRequest(req)
		c.authorize(creq.Header())
		resp, err := method(svc(ep), ctx, creq)
		if err != nil {
			return errorHeader(err), err
		}
		out = resp.Msg
		return resp.Header(), nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Short names for the generated service interfaces, whose method
// expressions (jobsAPI.GetJob) are what unary takes.
type (
	jobsAPI    = leaseholdv1connect.JobServiceClient
	workersAPI = leaseholdv1connect.WorkerServiceClient
	eventsAPI  = leaseholdv1connect.EventServiceClient
	clusterAPI = leaseholdv1connect.ClusterServiceClient
	queuesAPI  = leaseholdv1connect.QueueServiceClient
)

func jobSvc(e *endpoints) jobsAPI        { return e.jobs }
func workerSvc(e *endpoints) workersAPI  { return e.workers }
func eventSvc(e *endpoints) eventsAPI    { return e.events }
func clusterSvc(e *endpoints) clusterAPI { return e.cluster }
func queueSvc(e *endpoints) queuesAPI    { return e.queues }

// errorHeader returns the response headers a Connect error carries.
func errorHeader(err error) http.Header {
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		return cerr.Meta()
	}
	return nil
}

// newID returns a random idempotency key: 16 bytes, hex.
func newID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand panics rather)
	return hex.EncodeToString(b[:])
}
