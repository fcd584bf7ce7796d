package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// reasonTable is what the client must do with each reason: its sentinel,
// and whether a call answered with it is retried.
var reasonTable = map[string]struct {
	sentinel error
	retried  bool
}{
	transport.ReasonNotLeader:       {client.ErrNotLeader, true},
	transport.ReasonNoLeader:        {client.ErrNoLeader, true},
	transport.ReasonNotReady:        {client.ErrNotReady, true},
	transport.ReasonShuttingDown:    {client.ErrShuttingDown, true},
	transport.ReasonOutcomeUnknown:  {client.ErrOutcomeUnknown, true},
	transport.ReasonTimeout:         {client.ErrTimeout, true},
	transport.ReasonInvalidArgument: {client.ErrInvalidArgument, false},
	transport.ReasonTooLarge:        {client.ErrTooLarge, false},
	transport.ReasonNotFound:        {client.ErrNotFound, false},
	transport.ReasonConflict:        {client.ErrConflict, false},
	transport.ReasonStaleToken:      {client.ErrStaleToken, false},
	transport.ReasonNotOwner:        {client.ErrNotOwner, false},
	transport.ReasonUnknownWorker:   {client.ErrUnknownWorker, false},
	transport.ReasonUnreachable:     {client.ErrUnreachable, false},
	transport.ReasonJobFinished:     {client.ErrJobFinished, false},
	transport.ReasonJobNotDead:      {client.ErrJobNotDead, false},
	transport.ReasonTokensExhausted: {client.ErrTokensExhausted, false},
	transport.ReasonUnauthenticated: {client.ErrUnauthenticated, false},
	transport.ReasonForbidden:       {client.ErrPermissionDenied, false},
	transport.ReasonInternal:        {client.ErrInternal, false},
	transport.ReasonRateLimited:     {client.ErrRateLimited, true},
	transport.ReasonQuotaExceeded:   {client.ErrQuotaExceeded, false},
	transport.ReasonDiskFull:        {client.ErrDiskFull, true},
	transport.ReasonUpgradeRequired: {client.ErrUpgradeRequired, false},
}

// Every reason the API defines has its own sentinel, matched by errors.Is
// on an *Error, and no other sentinel matches.
func TestEveryReasonHasASentinel(t *testing.T) {
	for _, reason := range transport.Reasons() {
		want, ok := reasonTable[reason]
		if !ok {
			t.Errorf("reason %s has no sentinel in the test table: add it to client/errors.go and here", reason)
			continue
		}
		err := error(&client.Error{Reason: reason, Code: transport.CodeOf(reason)})
		if !errors.Is(err, want.sentinel) {
			t.Errorf("reason %s: errors.Is(err, %v) is false", reason, want.sentinel)
		}
		for other, o := range reasonTable {
			if other != reason && errors.Is(err, o.sentinel) {
				t.Errorf("reason %s also matches the sentinel of %s", reason, other)
			}
		}
	}
	if len(reasonTable) != len(transport.Reasons()) {
		t.Errorf("test table has %d reasons, transport %d", len(reasonTable), len(transport.Reasons()))
	}
}

// Over the wire: every reason comes back as its sentinel with its details,
// and exactly the retryable ones are retried (answered once with the error,
// then with success).
func TestReasonsOverTheWire(t *testing.T) {
	for _, reason := range transport.Reasons() {
		want := reasonTable[reason]
		t.Run(reason, func(t *testing.T) {
			node := newFakeNode(t)
			detail := &leaseholdv1.ErrorDetail{Field: "spec.id"}
			if reason == transport.ReasonNotLeader {
				detail = &leaseholdv1.ErrorDetail{LeaderId: "n1", LeaderApi: node.addr}
			}
			node.script("GetJob", &leaseholdv1.GetJobResponse{Job: &leaseholdv1.Job{Seq: 7}}, reasonErr(reason, detail))
			c := newClient(t, node.addr)

			job, err := c.Job(testCtx(t), "j1")
			if want.retried {
				if err != nil {
					t.Fatalf("Job: %v, want success after a retry", err)
				}
				if job.GetSeq() != 7 || node.count("GetJob") != 2 {
					t.Fatalf("job %v after %d calls, want seq 7 after 2", job, node.count("GetJob"))
				}
				return
			}
			if node.count("GetJob") != 1 {
				t.Fatalf("%d calls, want 1: %s must not be retried", node.count("GetJob"), reason)
			}
			if !errors.Is(err, want.sentinel) {
				t.Fatalf("err %v does not match %v", err, want.sentinel)
			}
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("err %T is not a *client.Error", err)
			}
			if e.Reason != reason || e.Code != transport.CodeOf(reason) || e.Field != "spec.id" || e.Message == "" {
				t.Fatalf("error %+v: want reason %s, code %v, field spec.id and a message", e, reason, transport.CodeOf(reason))
			}
		})
	}
}

func TestNotLeaderDetailsComeThrough(t *testing.T) {
	node := newFakeNode(t)
	// A NOT_LEADER naming itself cannot be followed: the client backs off
	// and asks again until its context ends, and the last answer is still
	// there to inspect.
	ctx, cancel := context.WithCancel(testCtx(t))
	node.on("GetJob", cancelOnCall(3, cancel, func() error {
		return reasonErr(transport.ReasonNotLeader, &leaseholdv1.ErrorDetail{LeaderId: "n2", LeaderApi: node.addr})()
	}))
	c := newClient(t, node.addr)
	_, err := c.Job(ctx, "j1")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, client.ErrNotLeader) {
		t.Fatalf("err %v: want the context's end and NOT_LEADER", err)
	}
	var e *client.Error
	if !errors.As(err, &e) || e.LeaderID != "n2" || e.LeaderAPI != node.addr {
		t.Fatalf("details %+v: want leader n2 at %s", e, node.addr)
	}
}

// cancelOnCall is a hook answering every call with answer(), that cancels
// a context on call n: a context that ends after a known number of
// attempts, whatever the machine's speed.
func cancelOnCall(n int, cancel context.CancelFunc, answer func() error) hook {
	var mu sync.Mutex
	calls := 0
	return func(context.Context, proto.Message, http.Header) (proto.Message, error) {
		mu.Lock()
		calls++
		if calls == n {
			cancel()
		}
		mu.Unlock()
		return nil, answer()
	}
}

func TestNotLeaderRedirectsAndPins(t *testing.T) {
	a, b := newFakeNode(t), newFakeNode(t)
	a.setMembers(a.addr, b.addr)
	a.on("GetJob", func(context.Context, proto.Message, http.Header) (proto.Message, error) {
		return nil, reasonErr(transport.ReasonNotLeader, &leaseholdv1.ErrorDetail{LeaderId: "b", LeaderApi: b.addr})()
	})
	c := newClient(t, a.addr)

	if _, err := c.Job(testCtx(t), "j1"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if a.count("GetJob") != 1 || b.count("GetJob") != 1 {
		t.Fatalf("calls a=%d b=%d, want 1 and 1", a.count("GetJob"), b.count("GetJob"))
	}
	if c.Leader() != b.addr {
		t.Fatalf("Leader() = %s, want %s", c.Leader(), b.addr)
	}
	if _, err := c.Job(testCtx(t), "j2"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if a.count("GetJob") != 1 || b.count("GetJob") != 2 {
		t.Fatalf("second call: a=%d b=%d, want it straight to b", a.count("GetJob"), b.count("GetJob"))
	}
}

func TestLeaderHeaderOnSuccessMovesPin(t *testing.T) {
	a, b := newFakeNode(t), newFakeNode(t)
	a.setMembers(a.addr, b.addr)
	a.setLeader(b.addr)
	c := newClient(t, a.addr)
	if _, err := c.Job(testCtx(t), "j1"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if c.Leader() != b.addr {
		t.Fatalf("Leader() = %s, want %s from the header", c.Leader(), b.addr)
	}
	if _, err := c.Job(testCtx(t), "j2"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if a.count("GetJob") != 1 || b.count("GetJob") != 1 {
		t.Fatalf("calls a=%d b=%d, want the second on b", a.count("GetJob"), b.count("GetJob"))
	}
}

func TestLeaderHeaderOnErrorMovesPin(t *testing.T) {
	a, b := newFakeNode(t), newFakeNode(t)
	a.setMembers(a.addr, b.addr)
	a.setLeader(b.addr)
	a.script("GetJob", nil, reasonErr(transport.ReasonNotFound, nil))
	c := newClient(t, a.addr)
	if _, err := c.Job(testCtx(t), "j1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("err %v, want not found", err)
	}
	if c.Leader() != b.addr {
		t.Fatalf("Leader() = %s, want %s", c.Leader(), b.addr)
	}
}

func TestRetriesNoLeaderUntilSuccess(t *testing.T) {
	node := newFakeNode(t)
	noLeader := reasonErr(transport.ReasonNoLeader, nil)
	node.script("GetJob", &leaseholdv1.GetJobResponse{Job: &leaseholdv1.Job{Seq: 1}}, noLeader, noLeader, noLeader)
	c := newClient(t, node.addr)
	if _, err := c.Job(testCtx(t), "j1"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if n := node.count("GetJob"); n != 4 {
		t.Fatalf("%d calls, want 4", n)
	}
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestUnavailableRotatesEndpoints(t *testing.T) {
	live := newFakeNode(t)
	dead := deadAddr(t)
	c := newClient(t, dead, live.addr)
	if _, err := c.Job(testCtx(t), "j1"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if c.Leader() != live.addr || live.count("GetJob") != 1 {
		t.Fatalf("Leader() = %s after %d calls on the live node", c.Leader(), live.count("GetJob"))
	}
}

func TestUnavailableAnswerIsRetried(t *testing.T) {
	node := newFakeNode(t)
	node.script("GetJob", nil, unavailable, unavailable)
	c := newClient(t, node.addr)
	if _, err := c.Job(testCtx(t), "j1"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if n := node.count("GetJob"); n != 3 {
		t.Fatalf("%d calls, want 3", n)
	}
}

func TestRetriesUntilContextEnds(t *testing.T) {
	node := newFakeNode(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	node.on("GetJob", cancelOnCall(5, cancel, reasonErr(transport.ReasonNoLeader, nil)))
	c := newClient(t, node.addr)
	_, err := c.Job(ctx, "j1")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("err %v, want the context's end and the last answer (NO_LEADER)", err)
	}
	if n := node.count("GetJob"); n != 5 {
		t.Fatalf("%d calls, want retries until the context ended on the 5th", n)
	}
}

func TestRetryStopsAtDeadline(t *testing.T) {
	node := newFakeNode(t)
	node.on("GetJob", func(context.Context, proto.Message, http.Header) (proto.Message, error) {
		return nil, reasonErr(transport.ReasonNoLeader, nil)()
	})
	c := newClient(t, node.addr)
	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Millisecond)
	defer cancel()
	if _, err := c.Job(ctx, "j1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
}

// cancellingTransport cancels a context after n round trips.
type cancellingTransport struct {
	base   *http.Transport
	mu     sync.Mutex
	n      int
	cancel context.CancelFunc
}

func (c *cancellingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return resp, err
}

func TestUnavailableUntilContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	rt := &cancellingTransport{base: &http.Transport{}, n: 3, cancel: cancel}
	t.Cleanup(rt.base.CloseIdleConnections)
	c := newClientWith(t, client.Config{Endpoints: []string{deadAddr(t)}, HTTPClient: &http.Client{Transport: rt}})
	_, err := c.Job(ctx, "j1")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("err %v, want the context's end and unavailable", err)
	}
}

// CallTimeout bounds each attempt, so a hung node costs one attempt and
// the call goes on elsewhere within the caller's deadline.
func TestHungNodeCostsOneAttempt(t *testing.T) {
	hung, live := newFakeNode(t), newFakeNode(t)
	hung.on("GetJob", func(ctx context.Context, _ proto.Message, _ http.Header) (proto.Message, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	// The CallTimeout is long enough for the live node to answer on a busy
	// machine: only the hung one must run into it.
	c := newClientWith(t, client.Config{Endpoints: []string{hung.addr, live.addr}, CallTimeout: time.Second})
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
	defer cancel()
	if _, err := c.Job(ctx, "j1"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if hung.count("GetJob") != 1 || live.count("GetJob") != 1 {
		t.Fatalf("calls hung=%d live=%d, want 1 and 1", hung.count("GetJob"), live.count("GetJob"))
	}
}

// Without a deadline of its own, the whole call is bounded by CallTimeout.
func TestCallTimeoutBoundsCallWithoutDeadline(t *testing.T) {
	hung := newFakeNode(t)
	hung.on("GetJob", func(ctx context.Context, _ proto.Message, _ http.Header) (proto.Message, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	c := newClientWith(t, client.Config{Endpoints: []string{hung.addr}, CallTimeout: 50 * time.Millisecond})
	if _, err := c.Job(context.Background(), "j1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Job: %v, want the CallTimeout deadline", err)
	}
}

func TestNoRetryOnStaleToken(t *testing.T) {
	node := newFakeNode(t)
	node.script("Report", nil, reasonErr(transport.ReasonStaleToken, nil))
	c := newClient(t, node.addr)
	_, err := c.Report(testCtx(t), &leaseholdv1.ReportRequest{WorkerId: "w", JobId: "j", Token: 3})
	if !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("err %v, want stale token", err)
	}
	if n := node.count("Report"); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}

// The API refuses a job without a queue; Submit sends DefaultQueue, as the
// API used to fill it in, and says so in the caller's spec.
func TestSubmitFillsDefaultQueue(t *testing.T) {
	node := newFakeNode(t)
	node.script("SubmitJob", &leaseholdv1.SubmitJobResponse{Created: true})
	c := newClient(t, node.addr)
	spec := &leaseholdv1.JobSpec{Id: "j"}
	if _, _, err := c.Submit(testCtx(t), spec); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	reqs := node.requests("SubmitJob")
	if len(reqs) != 1 {
		t.Fatalf("%d submits, want 1", len(reqs))
	}
	if sent := reqs[0].msg.(*leaseholdv1.SubmitJobRequest).GetSpec().GetQueue(); sent != client.DefaultQueue || spec.Queue != client.DefaultQueue {
		t.Fatalf("sent queue %q, spec's queue %q; want %q", sent, spec.Queue, client.DefaultQueue)
	}
}

func TestRetriesReuseIdempotencyKeys(t *testing.T) {
	node := newFakeNode(t)
	unknown := reasonErr(transport.ReasonOutcomeUnknown, nil)
	node.script("Acquire", &leaseholdv1.AcquireResponse{}, unknown)
	node.script("Report", &leaseholdv1.ReportResponse{}, unknown)
	node.script("SubmitJob", &leaseholdv1.SubmitJobResponse{Created: true}, unknown)
	c := newClient(t, node.addr)
	ctx := testCtx(t)

	areq := &leaseholdv1.AcquireRequest{WorkerId: "w", Max: 1}
	if _, err := c.Acquire(ctx, areq); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	rreq := &leaseholdv1.ReportRequest{WorkerId: "w", JobId: "j", Token: 1}
	if _, err := c.Report(ctx, rreq); err != nil {
		t.Fatalf("Report: %v", err)
	}
	spec := &leaseholdv1.JobSpec{Queue: "default", Kind: "k"}
	if _, created, err := c.Submit(ctx, spec); err != nil || !created {
		t.Fatalf("Submit: %v, created %v", err, created)
	}

	for _, tc := range []struct {
		method string
		id     func(proto.Message) string
		filled string
	}{
		{"Acquire", func(m proto.Message) string { return m.(*leaseholdv1.AcquireRequest).GetRequestId() }, areq.RequestId},
		{"Report", func(m proto.Message) string { return m.(*leaseholdv1.ReportRequest).GetReportId() }, rreq.ReportId},
		{"SubmitJob", func(m proto.Message) string { return m.(*leaseholdv1.SubmitJobRequest).GetSpec().GetId() }, spec.Id},
	} {
		reqs := node.requests(tc.method)
		if len(reqs) != 2 {
			t.Fatalf("%s: %d calls, want 2", tc.method, len(reqs))
		}
		first, second := tc.id(reqs[0].msg), tc.id(reqs[1].msg)
		if first == "" || first != second || first != tc.filled {
			t.Fatalf("%s: ids %q then %q, filled %q: want one id, fixed before the first attempt", tc.method, first, second, tc.filled)
		}
	}

	// A caller's own id is kept.
	own := &leaseholdv1.AcquireRequest{WorkerId: "w", RequestId: "mine"}
	if _, err := c.Acquire(ctx, own); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	reqs := node.requests("Acquire")
	if got := reqs[len(reqs)-1].msg.(*leaseholdv1.AcquireRequest).GetRequestId(); got != "mine" {
		t.Fatalf("request id %q, want the caller's", got)
	}
}

// The long poll's deadline covers the server's wait plus the CallTimeout.
func TestLongPollDeadlineCoversWait(t *testing.T) {
	node := newFakeNode(t)
	c := newClientWith(t, client.Config{Endpoints: []string{node.addr}, CallTimeout: 10 * time.Second})
	wait := 30 * time.Second
	if _, err := c.Acquire(context.Background(), &leaseholdv1.AcquireRequest{WorkerId: "w", Wait: durationpb.New(wait)}); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	ms, err := strconv.ParseInt(node.requests("Acquire")[0].header.Get("Connect-Timeout-Ms"), 10, 64)
	if err != nil {
		t.Fatalf("Connect-Timeout-Ms: %v", err)
	}
	if got := time.Duration(ms) * time.Millisecond; got <= wait || got > wait+10*time.Second {
		t.Fatalf("the call's timeout is %v, want above the %v wait and at most wait+CallTimeout", got, wait)
	}
}

func TestBearerToken(t *testing.T) {
	node := newFakeNode(t)
	c := newClientWith(t, client.Config{Endpoints: []string{node.addr}, Token: "s3cret"})
	if _, err := c.Job(testCtx(t), "j1"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if got := node.requests("GetJob")[0].header.Get("Authorization"); got != "Bearer s3cret" {
		t.Fatalf("Authorization %q", got)
	}
}

func TestStaleReadOption(t *testing.T) {
	node := newFakeNode(t)
	c := newClient(t, node.addr)
	if _, err := c.Job(testCtx(t), "j1", client.Stale()); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if got := node.requests("GetJob")[0].msg.(*leaseholdv1.GetJobRequest).GetConsistency(); got != leaseholdv1.Consistency_CONSISTENCY_STALE {
		t.Fatalf("consistency %v, want stale", got)
	}
}

func TestCancelSubmitterLoopsUntilNoneRemain(t *testing.T) {
	node := newFakeNode(t)
	answers := []*leaseholdv1.CancelSubmitterJobsResponse{
		{Cancelled: []string{"a", "b"}, Remaining: 3},
		{Remaining: 3}, // no progress: the client pauses, then asks again
		{Cancelled: []string{"c", "d", "e"}, Remaining: 0},
	}
	var mu sync.Mutex
	node.on("CancelSubmitterJobs", func(context.Context, proto.Message, http.Header) (proto.Message, error) {
		mu.Lock()
		defer mu.Unlock()
		a := answers[0]
		answers = answers[1:]
		return a, nil
	})
	c := newClient(t, node.addr)
	n, err := c.CancelSubmitter(testCtx(t), "exec-1", "executor stopped")
	if err != nil || n != 5 {
		t.Fatalf("CancelSubmitter = %d, %v; want 5", n, err)
	}
	for _, r := range node.requests("CancelSubmitterJobs") {
		if req := r.msg.(*leaseholdv1.CancelSubmitterJobsRequest); req.GetSubmitter() != "exec-1" || req.GetReason() != "executor stopped" {
			t.Fatalf("request %v", req)
		}
	}
}

// Status asks one node about itself: one attempt, no retry elsewhere.
func TestStatusIsOneAttempt(t *testing.T) {
	node := newFakeNode(t)
	node.script("Status", nil, reasonErr(transport.ReasonNoLeader, nil))
	c := newClient(t, node.addr)
	if _, err := c.Status(testCtx(t)); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Status: %v, want no leader", err)
	}
	if node.count("Status") != 1 {
		t.Fatalf("%d calls, want 1", node.count("Status"))
	}
}

func TestCloseEndsCalls(t *testing.T) {
	node := newFakeNode(t)
	parked := make(chan struct{})
	node.on("Acquire", func(ctx context.Context, _ proto.Message, _ http.Header) (proto.Message, error) {
		close(parked)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	c, err := client.New(client.Config{Endpoints: []string{node.addr}})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(context.Background(), &leaseholdv1.AcquireRequest{WorkerId: "w", Wait: durationpb.New(time.Minute)})
		errc <- err
	}()
	recv(t, "the long poll to park", parked)
	c.Close()
	if err := recv(t, "the long poll to end", errc); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Job(context.Background(), "j"); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Job after Close: %v", err)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	for _, cfg := range []client.Config{
		{Endpoints: []string{"no-port"}},
		{Endpoints: []string{"http://127.0.0.1:7701"}},
		{Endpoints: []string{":7701"}},
		{Endpoints: []string{"127.0.0.1:0"}},
		{Endpoints: []string{"127.0.0.1:70000"}},
		{Token: "has space"},
		{CallTimeout: -time.Second},
		{RetryBase: time.Second, RetryMax: time.Millisecond},
	} {
		if _, err := client.New(cfg); !errors.Is(err, client.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	c, err := client.New(client.Config{})
	if err != nil {
		t.Fatalf("New(zero): %v", err)
	}
	defer c.Close()
	if c.Leader() != client.DefaultEndpoints()[0] {
		t.Fatalf("Leader() = %s, want the first default endpoint", c.Leader())
	}
}

// A transport failure is an *Error too, with no reason and code
// Unavailable, matching ErrUnavailable.
func TestTransportFailureIsUnavailable(t *testing.T) {
	c := newClient(t, deadAddr(t))
	_, err := c.Status(testCtx(t))
	var e *client.Error
	if !errors.As(err, &e) || e.Reason != "" || e.Code != connect.CodeUnavailable || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Status on a dead node: %v", err)
	}
}

// A release refused STALE_TOKEN after an attempt that may have taken
// effect is an unknown outcome, not a refusal; without such an attempt it
// stays a refusal.
func TestReleaseRetriedAfterUnknownAttempt(t *testing.T) {
	node := newFakeNode(t)
	stale := reasonErr(transport.ReasonStaleToken, nil)
	node.script("Release", nil, unavailable, stale)
	c := newClient(t, node.addr)
	_, err := c.Release(testCtx(t), "w1", "j1", 3, "done")
	if !errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("Release after a lost attempt: %v, want outcome unknown", err)
	}
	node = newFakeNode(t)
	node.script("Release", nil, stale)
	c = newClient(t, node.addr)
	if _, err := c.Release(testCtx(t), "w1", "j1", 3, "done"); !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("Release refused at once: %v, want stale token", err)
	}
}
