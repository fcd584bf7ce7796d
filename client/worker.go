package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/clock"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

// WorkerOptions configure a Worker. NewWorker fills defaults into a copy and
// never changes the caller's value.
type WorkerOptions struct {
	// Client talks to the cluster. Required.
	Client *Client
	// ID is the worker's stable id: a restart with the same id finds its
	// leases again. Required; 1..128 printable ASCII bytes, no spaces
	// (rules.CheckID).
	ID string
	// Queues the worker takes jobs from. Default [DefaultQueue].
	Queues []string
	// Kinds the worker takes. Default: the kinds in Handlers. Every kind
	// listed must have a handler.
	Kinds []string
	// Concurrency is how many jobs run at once, and the capacity the worker
	// registers with. Default 1.
	Concurrency int
	// Handlers run jobs, by kind. Required, at least one. A job of a kind
	// with no handler is released.
	Handlers map[string]Handler
	// PollWait bounds one long-poll acquire (at most 60s). Default 30s.
	PollWait time.Duration
	// DrainTimeout is how long a graceful shutdown lets running handlers
	// finish before cancelling them with ErrShutdown. Default 30s.
	DrainTimeout time.Duration
	// Reattach is asked, after a restart, about each live lease the worker
	// still holds: return a handler to run the job again under its lease
	// (say, re-attach to a process still running), or false to release it.
	// Nil releases every one.
	Reattach func(ctx context.Context, job *Job) (Handler, bool)
	// Deadline, if set, is told the self-stop deadline (a reading of Clock)
	// each time it moves: at registration, before any job starts, and at
	// every acknowledged heartbeat, in order, from one goroutine at a time.
	// A worker whose jobs run in processes that outlive it hands it to
	// them, so they stop on time while it is down (client/supervisor).
	Deadline func(deadline time.Time)
	// Clock measures heartbeats and the self-stop deadline. Default
	// clock.System (suspend-aware); tests use clocktest.FakeClock.
	Clock clock.Clock
	// Logger. Default hclog.Default().Named("worker").
	Logger hclog.Logger
	// Observer watches the runtime's calls and acknowledgements (testers
	// record histories with it). Default: nothing watches.
	Observer Observer
	// Middleware wraps every handler the worker runs (Handlers' and those
	// Reattach returns), the first outermost: with [a, b], a job runs
	// a(b(handler)). Use it for what every job needs: logging, metrics,
	// tracing, a recover of your own. None may be nil.
	Middleware []Middleware
}

// Middleware wraps a Handler in another: it may act before and after the
// handler, change its context or result, or not call it at all.
type Middleware func(Handler) Handler

// Defaults of WorkerOptions.
const (
	DefaultPollWait     = 30 * time.Second
	DefaultDrainTimeout = 30 * time.Second
)

// Worker is the worker runtime: it registers, re-attaches to its leases
// after a restart, takes jobs, runs their handlers, heartbeats once per
// renew for all of them, applies the server's verdicts, stops its own jobs
// when heartbeats go unacknowledged, reports, and shuts down gracefully.
type Worker struct {
	c            *Client
	id           string
	queues       []string
	kinds        []string
	capacity     int
	handlers     map[string]Handler
	pollWait     time.Duration
	drainTimeout time.Duration
	reattachFn   func(ctx context.Context, job *Job) (Handler, bool)
	middleware   []Middleware
	deadlineFn   func(time.Time)
	clock        clock.Clock
	log          hclog.Logger
	observer     Observer

	started atomic.Bool
	// hard outlives Run's context until Run returns: handlers, reports and
	// releases run on it, so a shutdown drains them rather than cuts them.
	hard context.Context
	// work counts task and release goroutines. Only Run waits on it, after
	// every goroutine that adds to it has stopped.
	work sync.WaitGroup

	mu          sync.Mutex
	timings     timings
	lastAck     time.Time // send time of the last acknowledged heartbeat
	selfStopped bool      // jobs stopped; no acquiring until an ack
	reattached  bool      // unnamed leases are released only after re-attach
	tasks       map[uint64]*task
	releasing   map[uint64]bool
	acquiring   string             // request id of the acquire in flight
	stopAcquire context.CancelFunc // cancels it
	nexts       map[string]bool    // request ids of reports' next acquires in flight
	// ended holds when each lease whose task ended was let go, for the
	// last renew or so: an answer to a beat sent before that may still
	// list it unnamed, and it is not released then (it was held).
	ended    map[uint64]time.Time
	answered int // tasks in tasks whose reports were answered (task.answered)
	// soft is Run's context: once it ends, grants are released, not run.
	soft  context.Context
	acked chan struct{} // closed and replaced at every ack
	freed chan struct{} // closed and replaced when a task ends

	// notesTerm is the leader's term the last acknowledged heartbeat
	// named, whose memory holds the notes sent (zero: the server does not
	// take notes, and beats carry none).
	notesTerm uint64
	noteTurn  int // turns the first lease whose note a beat considers
}

// timings are the cluster's, from RegisterWorker and heartbeat replies.
type timings struct {
	renew, grace, toleration time.Duration
}

func parseTimings(t *leaseholdv1.Timings) (timings, error) {
	out := timings{
		renew:      t.GetRenew().AsDuration(),
		grace:      t.GetGrace().AsDuration(),
		toleration: t.GetToleration().AsDuration(),
	}
	if out.renew <= 0 || out.toleration <= 2*out.renew {
		return timings{}, fmt.Errorf("%w: server timings renew %v, toleration %v leave no time before self-stop",
			ErrInternal, out.renew, out.toleration)
	}
	return out, nil
}

// NewWorker checks opts and returns a worker ready to Run.
func NewWorker(opts WorkerOptions) (*Worker, error) {
	if opts.Client == nil {
		return nil, fmt.Errorf("%w: Client is nil", ErrInvalidConfig)
	}
	// The server's field rules are checked here, so a misconfigured worker
	// fails in NewWorker rather than on every call.
	if err := rules.CheckID("ID", opts.ID); err != nil {
		return nil, fmt.Errorf("%w: %v (%q)", ErrInvalidConfig, err, opts.ID)
	}
	w := &Worker{
		c:            opts.Client,
		id:           opts.ID,
		queues:       slices.Clone(opts.Queues),
		kinds:        slices.Clone(opts.Kinds),
		capacity:     opts.Concurrency,
		handlers:     maps.Clone(opts.Handlers),
		pollWait:     opts.PollWait,
		drainTimeout: opts.DrainTimeout,
		reattachFn:   opts.Reattach,
		middleware:   slices.Clone(opts.Middleware),
		deadlineFn:   opts.Deadline,
		clock:        opts.Clock,
		log:          opts.Logger,
		observer:     opts.Observer,
		tasks:        make(map[uint64]*task),
		releasing:    make(map[uint64]bool),
		nexts:        make(map[string]bool),
		ended:        make(map[uint64]time.Time),
		acked:        make(chan struct{}),
		freed:        make(chan struct{}),
	}
	if len(w.queues) == 0 {
		w.queues = []string{DefaultQueue}
	}
	if len(w.handlers) == 0 {
		return nil, fmt.Errorf("%w: Handlers is empty", ErrInvalidConfig)
	}
	for kind, h := range w.handlers {
		if err := rules.CheckName("Handlers kind", kind); err != nil {
			return nil, fmt.Errorf("%w: %v (%q)", ErrInvalidConfig, err, kind)
		}
		if h == nil {
			return nil, fmt.Errorf("%w: Handlers[%q] is nil", ErrInvalidConfig, kind)
		}
	}
	for i, m := range w.middleware {
		if m == nil {
			return nil, fmt.Errorf("%w: Middleware[%d] is nil", ErrInvalidConfig, i)
		}
	}
	for kind, h := range w.handlers {
		if w.handlers[kind] = w.wrap(h); w.handlers[kind] == nil {
			return nil, fmt.Errorf("%w: Middleware made Handlers[%q] nil", ErrInvalidConfig, kind)
		}
	}
	if len(w.kinds) == 0 {
		// Asking for exactly the kinds it can run keeps the worker from
		// taking a job only to release it, again and again.
		w.kinds = slices.Sorted(maps.Keys(w.handlers))
	}
	for i, q := range w.queues {
		if err := rules.CheckName(fmt.Sprintf("Queues[%d]", i), q); err != nil {
			return nil, fmt.Errorf("%w: %v (%q)", ErrInvalidConfig, err, q)
		}
	}
	for i, k := range w.kinds {
		if w.handlers[k] == nil {
			return nil, fmt.Errorf("%w: Kinds[%d] %q has no handler", ErrInvalidConfig, i, k)
		}
	}
	if err := rules.CheckNames("Queues", w.queues); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := rules.CheckNames("Kinds", w.kinds); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if w.capacity == 0 {
		w.capacity = 1
	}
	if w.capacity < 1 || w.capacity > rules.MaxCapacity {
		return nil, fmt.Errorf("%w: Concurrency %d is not in 1..%d", ErrInvalidConfig, opts.Concurrency, rules.MaxCapacity)
	}
	if w.pollWait == 0 {
		w.pollWait = DefaultPollWait
	}
	if w.pollWait < 0 || w.pollWait > rules.MaxWait {
		return nil, fmt.Errorf("%w: PollWait %v is not in (0, %v]", ErrInvalidConfig, opts.PollWait, rules.MaxWait)
	}
	if w.drainTimeout == 0 {
		w.drainTimeout = DefaultDrainTimeout
	}
	if w.drainTimeout < 0 {
		return nil, fmt.Errorf("%w: DrainTimeout %v is negative", ErrInvalidConfig, opts.DrainTimeout)
	}
	if w.clock == nil {
		w.clock = clock.System()
	}
	if w.log == nil {
		w.log = hclog.Default().Named("worker")
	}
	w.log = w.log.With("worker_id", w.id)
	return w, nil
}

// wrap wraps a handler in the middleware, the first outermost. It runs
// user code, so never under the worker's lock.
func (w *Worker) wrap(h Handler) Handler {
	for i := len(w.middleware) - 1; i >= 0; i-- {
		h = w.middleware[i](h)
	}
	return h
}

// Run registers the worker and runs jobs until ctx ends, then shuts down
// gracefully: it stops acquiring, lets running handlers finish within
// DrainTimeout (heartbeating meanwhile), cancels the rest with ErrShutdown
// and releases their leases. It does not deregister: a restart with the
// same ID re-attaches. Run returns nil after a shutdown, or the error that
// kept it from registering. A Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return ErrWorkerRunning
	}
	hard, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHard()
	w.hard = hard
	w.mu.Lock()
	w.soft = ctx
	w.mu.Unlock()

	if err := w.register(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	loopCtx, stopLoops := context.WithCancel(hard)
	var loops sync.WaitGroup
	loops.Go(func() { w.heartbeatLoop(loopCtx) })
	loops.Go(func() { w.watchdog(loopCtx) })

	w.reattach(ctx)
	w.acquireLoop(ctx)
	w.drain()

	stopLoops()
	loops.Wait()
	w.work.Wait() // releases started by the last heartbeats
	w.log.Info("worker stopped")
	return nil
}

// register registers the worker; the send time counts as the first
// acknowledged heartbeat, the start of the self-stop clock.
func (w *Worker) register(ctx context.Context) error {
	sent := w.clock.Now()
	done := w.observer.observe("RegisterWorker", &leaseholdv1.RegisterWorkerRequest{WorkerId: w.id, Capacity: uint32(w.capacity)})
	resp, err := w.c.RegisterWorker(unbounded(ctx), w.id, uint32(w.capacity))
	ended(done, resp, err)
	if err != nil {
		return fmt.Errorf("leasehold: worker %s: register: %w", w.id, err)
	}
	t, err := parseTimings(resp.GetTimings())
	if err != nil {
		return fmt.Errorf("leasehold: worker %s: register: %w", w.id, err)
	}
	w.mu.Lock()
	w.timings = t
	w.lastAck = sent
	w.observer.acknowledged(sent)
	deadline := w.deadlineLocked()
	w.mu.Unlock()
	w.publishDeadline(deadline)
	w.log.Info("worker registered", "capacity", w.capacity, "renew", t.renew, "grace", t.grace, "toleration", t.toleration)
	return nil
}

// reregister answers UNKNOWN_WORKER (an operator deregistered the worker,
// or the cluster lost it): registering again is idempotent. It is not an
// acknowledgement; only a heartbeat moves the self-stop deadline.
func (w *Worker) reregister(ctx context.Context) {
	done := w.observer.observe("RegisterWorker", &leaseholdv1.RegisterWorkerRequest{WorkerId: w.id, Capacity: uint32(w.capacity)})
	resp, err := w.c.RegisterWorker(ctx, w.id, uint32(w.capacity))
	ended(done, resp, err)
	if err != nil {
		w.log.Error("register again failed", "error", err)
		return
	}
	if t, err := parseTimings(resp.GetTimings()); err == nil {
		w.mu.Lock()
		w.timings = t
		w.mu.Unlock()
	}
	w.log.Warn("worker was unknown to the cluster; registered again")
}

// reattach asks Reattach about each live lease the cluster lists for this
// worker: a handler runs the job under its lease, a refusal releases it.
func (w *Worker) reattach(ctx context.Context) {
	defer func() {
		w.mu.Lock()
		w.reattached = true
		w.mu.Unlock()
	}()
	done := w.observer.observe("ListLeases", &leaseholdv1.ListLeasesRequest{WorkerId: w.id})
	grants, err := w.c.Leases(unbounded(ctx), w.id)
	ended(done, &leaseholdv1.ListLeasesResponse{Leases: grants}, err)
	if err != nil {
		if ctx.Err() == nil {
			// Heartbeats list these leases as unnamed; they are released then.
			w.log.Error("listing leases to re-attach failed", "error", err)
		}
		return
	}
	for _, g := range grants {
		job, err := jobOf(g)
		if err != nil {
			w.log.Error("ignoring a lease the cluster listed", "error", err)
			continue
		}
		h, ok := w.askReattach(ctx, job)
		if ok {
			h = w.wrap(h)
		}
		if ok && job.Lease.GetStartedAt() == nil {
			done := w.observer.observe("StartLease", &leaseholdv1.StartLeaseRequest{WorkerId: w.id, JobId: job.ID, Token: job.Token})
			lease, err := w.c.Start(ctx, w.id, job.ID, job.Token)
			ended(done, &leaseholdv1.StartLeaseResponse{Lease: lease}, err)
			if err != nil {
				w.log.Warn("starting a re-attached lease failed; not running it", "job_id", job.ID, "token", job.Token, "error", err)
				continue
			}
		}
		w.mu.Lock()
		if ok {
			w.log.Info("re-attached", "job_id", job.ID, "token", job.Token)
			w.addTaskLocked(job, h)
		} else {
			w.releaseLocked(job.ID, job.Token, "not re-attached after a worker restart")
		}
		w.mu.Unlock()
	}
}

func (w *Worker) askReattach(ctx context.Context, job *Job) (h Handler, ok bool) {
	if w.reattachFn == nil {
		return nil, false
	}
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("Reattach panicked; releasing the lease", "job_id", job.ID, "token", job.Token, "panic", r)
			h, ok = nil, false
		}
	}()
	h, ok = w.reattachFn(ctx, job)
	return h, ok && h != nil
}

// acquireLoop long-polls for jobs while there is room, until ctx ends. It
// never busy-polls: an empty answer has already waited PollWait, and a full
// worker waits for a task to end.
func (w *Worker) acquireLoop(ctx context.Context) {
	for fails := 0; ; {
		max, ok := w.waitForRoom(ctx)
		if !ok {
			return
		}
		req := &leaseholdv1.AcquireRequest{
			WorkerId:  w.id,
			RequestId: newID(),
			Queues:    w.queues,
			Kinds:     w.kinds,
			Max:       uint32(max),
			Start:     true,
			Wait:      durationpb.New(w.pollWait),
		}
		actx, cancel := context.WithCancel(unbounded(ctx))
		w.mu.Lock()
		if w.selfStopped {
			w.mu.Unlock()
			cancel()
			continue
		}
		w.acquiring, w.stopAcquire = req.RequestId, cancel
		w.mu.Unlock()

		done := w.observer.observe("Acquire", req)
		resp, err := w.c.Acquire(actx, req)
		ended(done, resp, err)

		// Clearing the in-flight id and adding the grants happen under one
		// lock, so a heartbeat reply never sees a granted lease as unknown.
		w.mu.Lock()
		w.acquiring, w.stopAcquire = "", nil
		if err == nil {
			w.admitLocked(ctx, resp.GetGrants())
		}
		w.mu.Unlock()
		stopped := actx.Err() != nil
		cancel()

		switch {
		case err == nil:
			fails = 0
			continue
		case ctx.Err() != nil:
			return
		case stopped:
			continue // self-stop cancelled it; waitForRoom waits for an ack
		case errors.Is(err, ErrUnknownWorker):
			w.reregister(ctx)
		case errors.Is(err, ErrUnreachable):
			// The server has not heard a heartbeat for grace: wait for one.
			w.mu.Lock()
			acked := w.acked
			w.mu.Unlock()
			select {
			case <-acked:
			case <-ctx.Done():
				return
			}
		default:
			w.log.Error("acquire failed", "error", err)
		}
		var hint time.Duration
		var e *Error
		if errors.As(err, &e) {
			hint = e.RetryAfter
		}
		if !w.c.sleep(ctx, fails, hint) {
			return
		}
		fails++
	}
}

// waitForRoom waits until the worker may acquire (not self-stopped) and
// has free slots, and returns how many; false when ctx ended.
func (w *Worker) waitForRoom(ctx context.Context) (int, bool) {
	for {
		w.mu.Lock()
		free := w.capacity - len(w.tasks)
		stopped := w.selfStopped
		wake := w.freed
		if stopped {
			wake = w.acked
		}
		w.mu.Unlock()
		if !stopped && free > 0 {
			return min(free, rules.MaxAcquireBatch), true
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// admitLocked starts a task for each grant, or releases the grant when the
// worker cannot run it now.
func (w *Worker) admitLocked(ctx context.Context, grants []*leaseholdv1.Grant) {
	for _, g := range grants {
		job, err := jobOf(g)
		if err != nil {
			w.log.Error("ignoring a grant", "error", err)
			continue
		}
		if _, ok := w.tasks[job.Token]; ok {
			continue // a replayed answer
		}
		h := w.handlers[job.Kind]
		switch {
		case ctx.Err() != nil:
			w.releaseLocked(job.ID, job.Token, "worker shutting down")
		case w.selfStopped:
			w.releaseLocked(job.ID, job.Token, "worker stopped its jobs: heartbeats unacknowledged")
		case h == nil:
			w.log.Warn("no handler for the job's kind; releasing", "job_id", job.ID, "token", job.Token, "kind", job.Kind)
			w.releaseLocked(job.ID, job.Token, "no handler for kind "+job.Kind)
		default:
			w.log.Info("lease acquired", "job_id", job.ID, "token", job.Token, "kind", job.Kind)
			w.addTaskLocked(job, h)
		}
	}
}

// drain waits for running tasks after Run's context ended: up to
// DrainTimeout on the worker's clock, then it cancels them with
// ErrShutdown and waits for them to return. Heartbeats go on meanwhile, so
// their leases stay alive while they wind down.
func (w *Worker) drain() {
	var expired <-chan time.Time
	for {
		w.mu.Lock()
		n := len(w.tasks)
		freed := w.freed
		w.mu.Unlock()
		if n == 0 {
			return
		}
		if expired == nil {
			w.log.Info("draining running jobs", "jobs", n, "drain_timeout", w.drainTimeout)
			timer := w.clock.NewTimer(w.drainTimeout)
			defer timer.Stop()
			expired = timer.C()
		}
		select {
		case <-freed:
		case <-expired:
			w.cancelAll(ErrShutdown)
		}
	}
}

// cancelAll cancels every running handler with cause.
func (w *Worker) cancelAll(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.tasks {
		t.cancel(cause)
	}
	if len(w.tasks) > 0 {
		w.log.Warn("cancelling running jobs", "jobs", len(w.tasks), "cause", cause)
	}
}

// renew is the current heartbeat period.
func (w *Worker) renew() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.timings.renew
}

// broadcast wakes everyone waiting on *ch.
func broadcast(ch *chan struct{}) {
	close(*ch)
	*ch = make(chan struct{})
}
