package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/h2ctest"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// hook scripts a fake node's answer to one method. It must return a fresh
// error value on each call (the node adds headers to it).
type hook func(ctx context.Context, msg proto.Message, hdr http.Header) (proto.Message, error)

// received is one request a fake node got.
type received struct {
	method string
	msg    proto.Message
	header http.Header
}

// fakeNode is one scripted leasehold node: the generated Connect handlers
// over httptest, answering each method by its hook (an empty answer when
// none is set) and recording every request.
type fakeNode struct {
	leaseholdv1connect.UnimplementedJobServiceHandler
	leaseholdv1connect.UnimplementedWorkerServiceHandler
	leaseholdv1connect.UnimplementedEventServiceHandler
	leaseholdv1connect.UnimplementedClusterServiceHandler

	srv  *httptest.Server
	addr string

	mu     sync.Mutex
	log    []received
	hooks  map[string]hook
	leader string // Leasehold-Leader on every answer when not empty
	watch  func(ctx context.Context, req *leaseholdv1.WatchEventsRequest, send func(*leaseholdv1.WatchEventsResponse) error) error
	// beats, when set, serves each heartbeat stream in place of the
	// Heartbeat hook; n counts the streams from 1.
	beats    func(ctx context.Context, n int, s *beatServer) error
	streams  int
	snapshot http.HandlerFunc
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	n := &fakeNode{hooks: make(map[string]hook)}
	mux := http.NewServeMux()
	mux.Handle(leaseholdv1connect.NewJobServiceHandler(n))
	mux.Handle(leaseholdv1connect.NewWorkerServiceHandler(n))
	mux.Handle(leaseholdv1connect.NewEventServiceHandler(n))
	mux.Handle(leaseholdv1connect.NewClusterServiceHandler(n))
	mux.HandleFunc("/v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		h := n.snapshot
		n.log = append(n.log, received{method: "snapshot " + r.Method, header: r.Header.Clone()})
		n.mu.Unlock()
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h(w, r)
	})
	// Like the real API: HTTP/1.1 and HTTP/2 without TLS (the client's
	// default transport speaks h2c).
	n.srv = h2ctest.Start(t, mux)
	n.addr = n.srv.Listener.Addr().String()
	return n
}

// on sets the hook of method (the generated method name, e.g. "GetJob").
func (n *fakeNode) on(method string, h hook) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hooks[method] = h
}

// script answers method with errs in turn, then with ok (nil: an empty
// answer) for every later call.
func (n *fakeNode) script(method string, ok proto.Message, errs ...func() error) {
	var mu sync.Mutex
	n.on(method, func(context.Context, proto.Message, http.Header) (proto.Message, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) > 0 {
			e := errs[0]
			errs = errs[1:]
			return nil, e()
		}
		return ok, nil
	})
}

func (n *fakeNode) setWatch(w func(ctx context.Context, req *leaseholdv1.WatchEventsRequest, send func(*leaseholdv1.WatchEventsResponse) error) error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.watch = w
}

func (n *fakeNode) setSnapshot(h http.HandlerFunc) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.snapshot = h
}

func (n *fakeNode) setLeader(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.leader = addr
}

// requests returns the requests method got, in order.
func (n *fakeNode) requests(method string) []received {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []received
	for _, r := range n.log {
		if r.method == method {
			out = append(out, r)
		}
	}
	return out
}

func (n *fakeNode) count(method string) int { return len(n.requests(method)) }

// answer records a request and runs its hook.
func answer[Res any](ctx context.Context, n *fakeNode, method string, msg proto.Message, hdr http.Header) (*connect.Response[Res], error) {
	n.mu.Lock()
	n.log = append(n.log, received{method: method, msg: proto.Clone(msg), header: hdr.Clone()})
	h := n.hooks[method]
	leader := n.leader
	n.mu.Unlock()

	var out proto.Message
	var err error
	if h != nil {
		out, err = h(ctx, msg, hdr)
	}
	if err != nil {
		var cerr *connect.Error
		if !errors.As(err, &cerr) {
			// What a Connect handler answers for a bare error.
			code := connect.CodeUnknown
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				code = connect.CodeDeadlineExceeded
			case errors.Is(err, context.Canceled):
				code = connect.CodeCanceled
			}
			cerr = connect.NewError(code, err)
		}
		if leader != "" {
			cerr.Meta().Set(transport.HeaderLeader, leader)
		}
		return nil, cerr
	}
	res := new(Res)
	if out != nil {
		res = any(out).(*Res)
	}
	resp := connect.NewResponse(res)
	if leader != "" {
		resp.Header().Set(transport.HeaderLeader, leader)
	}
	return resp, nil
}

// reasonErr builds the error a leasehold node answers with.
func reasonErr(reason string, detail *leaseholdv1.ErrorDetail) func() error {
	return func() error {
		var d *leaseholdv1.ErrorDetail
		if detail != nil {
			d = proto.Clone(detail).(*leaseholdv1.ErrorDetail)
		}
		return transport.NewError(reason, errors.New("scripted "+reason), d)
	}
}

func unavailable() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("scripted: node down"))
}

// The generated handler methods, each answered by its hook.

func (n *fakeNode) SubmitJob(ctx context.Context, r *connect.Request[leaseholdv1.SubmitJobRequest]) (*connect.Response[leaseholdv1.SubmitJobResponse], error) {
	return answer[leaseholdv1.SubmitJobResponse](ctx, n, "SubmitJob", r.Msg, r.Header())
}

func (n *fakeNode) GetJob(ctx context.Context, r *connect.Request[leaseholdv1.GetJobRequest]) (*connect.Response[leaseholdv1.GetJobResponse], error) {
	return answer[leaseholdv1.GetJobResponse](ctx, n, "GetJob", r.Msg, r.Header())
}

func (n *fakeNode) CancelSubmitterJobs(ctx context.Context, r *connect.Request[leaseholdv1.CancelSubmitterJobsRequest]) (*connect.Response[leaseholdv1.CancelSubmitterJobsResponse], error) {
	return answer[leaseholdv1.CancelSubmitterJobsResponse](ctx, n, "CancelSubmitterJobs", r.Msg, r.Header())
}

func (n *fakeNode) RegisterWorker(ctx context.Context, r *connect.Request[leaseholdv1.RegisterWorkerRequest]) (*connect.Response[leaseholdv1.RegisterWorkerResponse], error) {
	return answer[leaseholdv1.RegisterWorkerResponse](ctx, n, "RegisterWorker", r.Msg, r.Header())
}

func (n *fakeNode) Acquire(ctx context.Context, r *connect.Request[leaseholdv1.AcquireRequest]) (*connect.Response[leaseholdv1.AcquireResponse], error) {
	return answer[leaseholdv1.AcquireResponse](ctx, n, "Acquire", r.Msg, r.Header())
}

func (n *fakeNode) StartLease(ctx context.Context, r *connect.Request[leaseholdv1.StartLeaseRequest]) (*connect.Response[leaseholdv1.StartLeaseResponse], error) {
	return answer[leaseholdv1.StartLeaseResponse](ctx, n, "StartLease", r.Msg, r.Header())
}

func (n *fakeNode) Heartbeat(ctx context.Context, r *connect.Request[leaseholdv1.HeartbeatRequest]) (*connect.Response[leaseholdv1.HeartbeatResponse], error) {
	return answer[leaseholdv1.HeartbeatResponse](ctx, n, "Heartbeat", r.Msg, r.Header())
}

// HeartbeatStream answers each beat by the Heartbeat hook, recording it as
// a "Heartbeat" request, and ends the stream with the hook's error. A
// "HeartbeatStream" hook, asked once when a stream opens (with a nil
// message), may refuse the stream; each stream is recorded as a
// "HeartbeatStream" request.
func (n *fakeNode) HeartbeatStream(ctx context.Context, s *connect.BidiStream[leaseholdv1.HeartbeatStreamRequest, leaseholdv1.HeartbeatStreamResponse]) error {
	n.mu.Lock()
	n.log = append(n.log, received{method: "HeartbeatStream", header: s.RequestHeader().Clone()})
	open := n.hooks["HeartbeatStream"]
	leader := n.leader
	beats := n.beats
	n.streams++
	count := n.streams
	n.mu.Unlock()
	if leader != "" {
		s.ResponseHeader().Set(transport.HeaderLeader, leader)
	}
	if open != nil {
		if _, err := open(ctx, nil, s.RequestHeader()); err != nil {
			return withLeader(err, leader)
		}
	}
	if beats != nil {
		return beats(ctx, count, s)
	}
	for {
		req, err := s.Receive()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := answer[leaseholdv1.HeartbeatResponse](ctx, n, "Heartbeat", req.GetHeartbeat(), s.RequestHeader())
		if err != nil {
			return err
		}
		if err := s.Send(&leaseholdv1.HeartbeatStreamResponse{Seq: req.GetSeq(), Heartbeat: resp.Msg}); err != nil {
			return err
		}
	}
}

type beatServer = connect.BidiStream[leaseholdv1.HeartbeatStreamRequest, leaseholdv1.HeartbeatStreamResponse]

func (n *fakeNode) setBeats(b func(ctx context.Context, n int, s *beatServer) error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.beats = b
}

// withLeader is err as a node answers it: a *connect.Error naming the
// leader, when one is set.
func withLeader(err error, leader string) error {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		cerr = connect.NewError(connect.CodeUnknown, err)
	}
	if leader != "" {
		cerr.Meta().Set(transport.HeaderLeader, leader)
	}
	return cerr
}

func (n *fakeNode) Report(ctx context.Context, r *connect.Request[leaseholdv1.ReportRequest]) (*connect.Response[leaseholdv1.ReportResponse], error) {
	return answer[leaseholdv1.ReportResponse](ctx, n, "Report", r.Msg, r.Header())
}

func (n *fakeNode) Release(ctx context.Context, r *connect.Request[leaseholdv1.ReleaseRequest]) (*connect.Response[leaseholdv1.ReleaseResponse], error) {
	return answer[leaseholdv1.ReleaseResponse](ctx, n, "Release", r.Msg, r.Header())
}

func (n *fakeNode) ListLeases(ctx context.Context, r *connect.Request[leaseholdv1.ListLeasesRequest]) (*connect.Response[leaseholdv1.ListLeasesResponse], error) {
	return answer[leaseholdv1.ListLeasesResponse](ctx, n, "ListLeases", r.Msg, r.Header())
}

func (n *fakeNode) ListEvents(ctx context.Context, r *connect.Request[leaseholdv1.ListEventsRequest]) (*connect.Response[leaseholdv1.ListEventsResponse], error) {
	return answer[leaseholdv1.ListEventsResponse](ctx, n, "ListEvents", r.Msg, r.Header())
}

func (n *fakeNode) Status(ctx context.Context, r *connect.Request[leaseholdv1.StatusRequest]) (*connect.Response[leaseholdv1.StatusResponse], error) {
	return answer[leaseholdv1.StatusResponse](ctx, n, "Status", r.Msg, r.Header())
}

func (n *fakeNode) Members(ctx context.Context, r *connect.Request[leaseholdv1.MembersRequest]) (*connect.Response[leaseholdv1.MembersResponse], error) {
	return answer[leaseholdv1.MembersResponse](ctx, n, "Members", r.Msg, r.Header())
}

// setMembers makes Members list these API addresses, as a node lists its
// cluster's. The client follows a hint to a node outside its Endpoints
// only when the cluster lists it.
func (n *fakeNode) setMembers(addrs ...string) {
	n.on("Members", func(context.Context, proto.Message, http.Header) (proto.Message, error) {
		resp := &leaseholdv1.MembersResponse{}
		for i, a := range addrs {
			resp.Members = append(resp.Members, &leaseholdv1.Member{Id: "n" + strconv.Itoa(i+1), ApiAddr: a, Voter: true})
		}
		return resp, nil
	})
}

func (n *fakeNode) WatchEvents(ctx context.Context, r *connect.Request[leaseholdv1.WatchEventsRequest], s *connect.ServerStream[leaseholdv1.WatchEventsResponse]) error {
	n.mu.Lock()
	n.log = append(n.log, received{method: "WatchEvents", msg: proto.Clone(r.Msg), header: r.Header().Clone()})
	w := n.watch
	leader := n.leader
	n.mu.Unlock()
	if leader != "" {
		s.ResponseHeader().Set(transport.HeaderLeader, leader)
	}
	if w == nil {
		return connect.NewError(connect.CodeUnimplemented, errors.New("no watch scripted"))
	}
	return w(ctx, r.Msg, s.Send)
}

// newClient returns a client of the given endpoints with fast retries,
// closed when the test ends.
func newClient(t *testing.T, endpoints ...string) *client.Client {
	t.Helper()
	return newClientWith(t, client.Config{Endpoints: endpoints})
}

func newClientWith(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	if cfg.RetryBase == 0 {
		cfg.RetryBase = time.Millisecond
		cfg.RetryMax = 5 * time.Millisecond
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// waitFor polls cond until it holds; the bound only turns a hang into a
// failure, nothing is timed by it.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	bound := time.NewTimer(20 * time.Second)
	defer bound.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-bound.C:
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// recv takes one value from ch, failing the test on a hang.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	bound := time.NewTimer(20 * time.Second)
	defer bound.Stop()
	select {
	case v := <-ch:
		return v
	case <-bound.C:
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// testCtx is a context that ends with the test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}
