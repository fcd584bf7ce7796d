package client_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/clock/clocktest"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// The fake cluster's timings, on the fake clock's timeline.
const (
	renew      = 10 * time.Second
	grace      = 50 * time.Second
	toleration = 300 * time.Second
	workerID   = "w1"
)

// workerHarness is a fake node scripted as the worker side of a cluster,
// a client of it and a fake clock for the worker.
type workerHarness struct {
	t      *testing.T
	node   *fakeNode
	client *client.Client
	clock  *clocktest.FakeClock
	start  time.Time // the clock's reading at registration
	// grants feeds Acquire: a long poll answers with the first grant sent,
	// plus any others already waiting, up to its max.
	grants chan *leaseholdv1.Grant

	mu       sync.Mutex
	verdicts map[uint64]*leaseholdv1.LeaseStatus
	hbFail   bool
	// hbDelay is added to the worker's clock while the first heartbeat is
	// "in flight" (the fake answers late).
	hbDelay time.Duration
	unnamed []*leaseholdv1.Lease // in the next heartbeat reply only
	// noNotes makes the fake a server from before progress notes: it
	// refuses a heartbeat carrying any, as strict decoding does, and its
	// answers do not set notes_term. Otherwise they carry term.
	noNotes bool
	term    uint64
	live    []*leaseholdv1.Grant // ListLeases
}

func newWorkerHarness(t *testing.T) *workerHarness {
	t.Helper()
	h := &workerHarness{
		t:        t,
		node:     newFakeNode(t),
		clock:    clocktest.NewFakeClock(),
		grants:   make(chan *leaseholdv1.Grant, 16),
		verdicts: make(map[uint64]*leaseholdv1.LeaseStatus),
	}
	h.start = h.clock.Now()
	h.client = newClient(t, h.node.addr)
	h.node.on("RegisterWorker", func(_ context.Context, msg proto.Message, _ http.Header) (proto.Message, error) {
		req := msg.(*leaseholdv1.RegisterWorkerRequest)
		return &leaseholdv1.RegisterWorkerResponse{
			Worker:  &leaseholdv1.Worker{Id: req.GetWorkerId(), Capacity: req.GetCapacity()},
			Timings: timingsPB(),
		}, nil
	})
	h.node.on("Acquire", h.acquire)
	h.node.on("Heartbeat", h.heartbeat)
	h.node.on("ListLeases", func(context.Context, proto.Message, http.Header) (proto.Message, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return &leaseholdv1.ListLeasesResponse{Leases: h.live}, nil
	})
	h.node.on("Report", func(_ context.Context, msg proto.Message, _ http.Header) (proto.Message, error) {
		req := msg.(*leaseholdv1.ReportRequest)
		return &leaseholdv1.ReportResponse{JobId: req.GetJobId(), Token: req.GetToken(), Outcome: req.GetOutcome(), State: leaseholdv1.JobState_JOB_STATE_REPORTED}, nil
	})
	return h
}

func timingsPB() *leaseholdv1.Timings {
	return &leaseholdv1.Timings{
		Renew:      durationpb.New(renew),
		Grace:      durationpb.New(grace),
		Toleration: durationpb.New(toleration),
	}
}

func (h *workerHarness) acquire(ctx context.Context, msg proto.Message, _ http.Header) (proto.Message, error) {
	req := msg.(*leaseholdv1.AcquireRequest)
	var out []*leaseholdv1.Grant
	select {
	case g := <-h.grants:
		out = append(out, g)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for len(out) < int(max(req.GetMax(), 1)) {
		select {
		case g := <-h.grants:
			out = append(out, g)
		default:
			return &leaseholdv1.AcquireResponse{Grants: out}, nil
		}
	}
	return &leaseholdv1.AcquireResponse{Grants: out}, nil
}

func (h *workerHarness) heartbeat(_ context.Context, msg proto.Message, _ http.Header) (proto.Message, error) {
	req := msg.(*leaseholdv1.HeartbeatRequest)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hbFail {
		return nil, unavailable()
	}
	if h.hbDelay > 0 {
		h.clock.Advance(h.hbDelay)
		h.hbDelay = 0
	}
	if h.noNotes && len(req.GetNotes()) > 0 {
		return nil, transport.NewError(transport.ReasonInvalidArgument,
			errors.New("unknown field number 3 of leasehold.v1.HeartbeatRequest"), &leaseholdv1.ErrorDetail{Field: "3"})
	}
	resp := &leaseholdv1.HeartbeatResponse{Timings: timingsPB(), Unnamed: h.unnamed}
	if !h.noNotes {
		resp.NotesTerm = 1 + h.term
	}
	h.unnamed = nil
	for _, ref := range req.GetLeases() {
		st := &leaseholdv1.LeaseStatus{JobId: ref.GetJobId(), Token: ref.GetToken(), Verdict: leaseholdv1.Verdict_VERDICT_KEEP}
		if v := h.verdicts[ref.GetToken()]; v != nil {
			st.Verdict, st.Revoke = v.GetVerdict(), v.GetRevoke()
		}
		resp.Leases = append(resp.Leases, st)
	}
	return resp, nil
}

func (h *workerHarness) setVerdict(token uint64, v leaseholdv1.Verdict, r leaseholdv1.Revoke) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.verdicts[token] = &leaseholdv1.LeaseStatus{Verdict: v, Revoke: r}
}

// newTerm has the fake answer as a new leader's term.
func (h *workerHarness) newTerm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.term++
}

func (h *workerHarness) setNoNotes(old bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.noNotes = old
}

func (h *workerHarness) setHeartbeatFail(fail bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hbFail = fail
}

// running is a worker whose Run is in progress.
type running struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan error
	err    error
	ended  bool
}

// run starts a worker with opts (Client, ID, Clock and Logger filled in).
func (h *workerHarness) run(opts client.WorkerOptions) *running {
	h.t.Helper()
	w := h.newWorker(opts)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: h.t, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	h.t.Cleanup(func() { r.stop() })
	return r
}

// wait waits for Run to return and returns its error.
func (r *running) wait() error {
	r.t.Helper()
	if !r.ended {
		r.ended = true
		r.err = recv(r.t, "Run to return", r.done)
	}
	return r.err
}

// stop cancels Run's context and waits for it to return.
func (r *running) stop() error {
	r.t.Helper()
	r.cancel()
	return r.wait()
}

// stopDraining stops a worker that has running handlers: it cancels Run's
// context, waits for the drain bound to be armed, and moves the clock past
// it.
func (h *workerHarness) stopDraining(r *running, drain time.Duration) error {
	h.t.Helper()
	r.cancel()
	at := h.clock.Now().Sub(h.start) + drain
	h.waitTimerAt(at)
	h.advanceTo(at)
	return r.wait()
}

func (h *workerHarness) newWorker(opts client.WorkerOptions) *client.Worker {
	h.t.Helper()
	opts.Client = h.client
	opts.Clock = h.clock
	if opts.ID == "" {
		opts.ID = workerID
	}
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: h.t.Name(), Output: h.t.Output(), Level: hclog.Warn})
	}
	w, err := client.NewWorker(opts)
	if err != nil {
		h.t.Fatalf("NewWorker: %v", err)
	}
	return w
}

// advanceAt waits until a timer is armed at the clock's start plus at
// (a heartbeat tick, the self-stop deadline, the drain bound), then moves
// the clock there.
func (h *workerHarness) waitTimerAt(at time.Duration) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.clock.WaitForTimerAt(ctx, h.start.Add(at)); err != nil {
		h.t.Fatalf("no timer armed at start+%v (armed: %v)", at, h.offsets())
	}
}

// advanceTo moves the fake clock to start+at.
func (h *workerHarness) advanceTo(at time.Duration) int {
	return h.clock.Advance(h.start.Add(at).Sub(h.clock.Now()))
}

// offsets are the armed timers as offsets from start, for messages.
func (h *workerHarness) offsets() []time.Duration {
	var out []time.Duration
	for _, d := range h.clock.Deadlines() {
		out = append(out, d.Sub(h.start))
	}
	return out
}

// heartbeats returns the lease tokens each heartbeat named, in order.
func (h *workerHarness) heartbeats() [][]uint64 {
	var out [][]uint64
	for _, r := range h.node.requests("Heartbeat") {
		req := r.msg.(*leaseholdv1.HeartbeatRequest)
		if req.GetWorkerId() != workerID {
			h.t.Errorf("heartbeat from worker %q", req.GetWorkerId())
		}
		var tokens []uint64
		for _, l := range req.GetLeases() {
			tokens = append(tokens, l.GetToken())
		}
		out = append(out, tokens)
	}
	return out
}

func (h *workerHarness) reports() []*leaseholdv1.ReportRequest {
	var out []*leaseholdv1.ReportRequest
	for _, r := range h.node.requests("Report") {
		out = append(out, r.msg.(*leaseholdv1.ReportRequest))
	}
	return out
}

func (h *workerHarness) released() []uint64 {
	var out []uint64
	for _, r := range h.node.requests("Release") {
		out = append(out, r.msg.(*leaseholdv1.ReleaseRequest).GetToken())
	}
	slices.Sort(out)
	return out
}

// grant builds a lease of job id on token, running.
func grant(id, kind string, token uint64, payload string) *leaseholdv1.Grant {
	return &leaseholdv1.Grant{
		Job: &leaseholdv1.Job{
			Spec:     &leaseholdv1.JobSpec{Id: id, Queue: "default", Kind: kind, Payload: []byte(payload), Submitter: "exec"},
			State:    leaseholdv1.JobState_JOB_STATE_RUNNING,
			Attempts: 1,
		},
		Lease: &leaseholdv1.Lease{
			Token:     token,
			JobId:     id,
			WorkerId:  workerID,
			State:     leaseholdv1.LeaseState_LEASE_STATE_ACTIVE,
			GrantedAt: timestamppb.Now(),
			StartedAt: timestamppb.Now(),
		},
	}
}

// blockingHandler records the jobs it gets and each one's context cause,
// and returns ctx's error once its context ends.
type blockingHandler struct {
	started chan *client.Job
	causes  chan error
}

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{started: make(chan *client.Job, 16), causes: make(chan error, 16)}
}

func (b *blockingHandler) handle(ctx context.Context, job *client.Job) (client.Result, error) {
	b.started <- job
	<-ctx.Done()
	b.causes <- context.Cause(ctx)
	return client.Result{}, ctx.Err()
}
