package client

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// task is one lease the worker holds, from grant to report or release. It
// stays in Worker.tasks, and so in every heartbeat, until then: a handler
// that is still running keeps its lease renewed, whatever it was told.
type task struct {
	job      *Job
	handler  Handler
	reportID string // fixed for the lease: a retried report gets the first answer

	ctx    context.Context // the handler's
	cancel context.CancelCauseFunc
	// lease ends when the lease is lost; it bounds the report.
	lease    context.Context
	endLease context.CancelFunc

	lost bool // guarded by Worker.mu: nothing is reported
	// reporting is set, under Worker.mu, once the handler has returned and
	// its report is being sent: a heartbeat's "lost" no longer cancels it.
	reporting bool
	// answered is set, under Worker.mu, when the cluster answers the
	// report: the lease has ended and its slot is free, though the task
	// stays in Worker.tasks until its goroutine ends (Worker.answered).
	answered bool
	// killed closes when the server kills the job, even after a cancel
	// already ended ctx (see Killed); guarded by Worker.mu.
	killed     chan struct{}
	killClosed bool

	// The handler's latest progress note (Job.Progress), its version, and
	// the version of the last one a heartbeat acknowledged carried;
	// guarded by Worker.mu.
	note              string
	noteVer, ackedVer uint64
}

// killedKey carries a task's killed channel in its handler's context.
type killedKey struct{}

// Killed returns a channel that closes when the server kills the job the
// handler ctx belongs to: at once with a kill, or later when a kill follows
// a cancel (the server upgrades the revoke). A handler that stops its job
// gracefully on a cancel watches it to stop at once when told to. Nil for
// a context that is not a handler's.
func Killed(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(killedKey{}).(chan struct{})
	return ch
}

// killLocked tells the handler the job was killed.
func (t *task) killLocked() {
	if !t.killClosed {
		t.killClosed = true
		close(t.killed)
	}
}

// addTaskLocked records a lease and starts its handler.
func (w *Worker) addTaskLocked(job *Job, h Handler) {
	if _, ok := w.tasks[job.Token]; ok {
		return
	}
	t := &task{job: job, handler: h, reportID: newID(), killed: make(chan struct{})}
	job.progress = func(note string) { w.noteProgress(t, note) }
	t.ctx, t.cancel = context.WithCancelCause(context.WithValue(w.hard, killedKey{}, t.killed))
	t.lease, t.endLease = context.WithCancel(w.hard)
	w.tasks[job.Token] = t
	w.work.Add(1)
	go w.runTask(t)
}

// noteProgress makes note the task's latest, for the next heartbeat.
func (w *Worker) noteProgress(t *task, note string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if note == t.note {
		return
	}
	t.note = note
	t.noteVer++
}

// loseLocked gives a task's lease up for lost: its handler is cancelled
// with ErrLeaseLost and nothing will be reported.
func (w *Worker) loseLocked(t *task, why string) {
	if t.lost {
		return
	}
	t.lost = true
	t.cancel(ErrLeaseLost)
	t.endLease()
	w.log.Warn("lease lost; stopping the job", "job_id", t.job.ID, "token", t.job.Token, "why", why)
}

// runTask runs a handler and then reports its result, or releases the
// lease (shutdown), or does nothing (lease lost).
func (w *Worker) runTask(t *task) {
	defer w.work.Done()
	res, err := w.callHandler(t)
	cause := context.Cause(t.ctx)

	w.mu.Lock()
	lost := t.lost
	w.mu.Unlock()
	switch {
	case lost:
		w.log.Warn("job stopped after its lease was lost; not reporting", "job_id", t.job.ID, "token", t.job.Token)
	case errors.Is(err, ErrExecutionLost):
		// Before the shutdown case: an execution that vanished while the
		// worker shut down must not be released to run again.
		w.settleLost(t, err, cause)
	case errors.Is(cause, ErrShutdown) && err != nil:
		w.release(t.job.ID, t.job.Token, "worker shut down before the job finished")
	default:
		w.report(t, res, err, cause)
	}

	t.cancel(nil)
	t.endLease()
	w.mu.Lock()
	delete(w.tasks, t.job.Token)
	w.ended[t.job.Token] = w.clock.Now()
	if t.answered {
		w.answered--
	}
	broadcast(&w.freed)
	w.mu.Unlock()
}

// callHandler runs the handler, turning a panic into an error.
func (w *Worker) callHandler(t *task) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("handler panicked", "job_id", t.job.ID, "token", t.job.Token, "panic", r, "stack", string(debug.Stack()))
			res, err = Result{}, fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return t.handler(t.ctx, t.job)
}

// report sends the task's final word with its fixed report id, retrying
// (in the client) until the lease is lost or toleration has passed.
func (w *Worker) report(t *task, res Result, herr, cause error) {
	outcome, retryable, message, retryAfter := outcomeOf(res, herr, cause)
	req := &leaseholdv1.ReportRequest{
		WorkerId:  w.id,
		JobId:     t.job.ID,
		Token:     t.job.Token,
		ReportId:  t.reportID,
		Outcome:   outcome,
		Retryable: retryable,
		Ref:       strings.ToValidUTF8(res.Ref, "\uFFFD"),
		Message:   clip(message, rules.MaxMessageLen),
	}
	if retryAfter > 0 {
		req.RetryAfter = durationpb.New(min(retryAfter, rules.MaxRetryDelay))
	}
	w.mu.Lock()
	bound := w.timings.toleration
	req.Next = w.nextLocked()
	t.reporting = true
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.lease, bound)
	defer cancel()

	resp, err := w.reportNext(ctx, t, req)
	if err != nil && req.RetryAfter != nil && (errors.Is(err, ErrUpgradeRequired) || refusedField(err, "9", "retry_after")) {
		// A cluster whose voters cannot all apply a snooze yet (or a node
		// of a build before it): the same report without its delay, so the
		// job retries by its policy instead of its lease being dropped.
		w.log.Warn("snooze refused by the cluster; reporting a plain retryable failure", "job_id", t.job.ID, "token", t.job.Token, "error", err)
		req.RetryAfter = nil
		resp, err = w.reportNext(ctx, t, req)
	}
	if err != nil && req.Next != nil && (errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrTooLarge)) {
		// A refused next acquire is no reason to fail the job: the
		// report alone.
		req.Next = nil
		resp, err = w.reportNext(ctx, t, req)
	}
	if err != nil && (errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrTooLarge)) {
		// Refused by validation, so never recorded: end the lease with a
		// failure that says why, rather than leave it renewed forever.
		w.log.Error("report refused; reporting a failure instead", "job_id", t.job.ID, "token", t.job.Token, "error", err)
		req = &leaseholdv1.ReportRequest{
			WorkerId: w.id,
			JobId:    t.job.ID,
			Token:    t.job.Token,
			ReportId: newID(),
			Outcome:  leaseholdv1.Outcome_OUTCOME_FAILED,
			Message:  clip("the handler's report was refused: "+err.Error(), rules.MaxMessageLen),
		}
		resp, err = w.reportNext(ctx, t, req)
	}
	switch {
	case err == nil:
		w.log.Info("reported", "job_id", t.job.ID, "token", t.job.Token, "outcome", req.Outcome, "state", resp.GetState(), "requeued", resp.GetRequeued())
	case errors.Is(err, ErrStaleToken):
		w.log.Warn("report refused: the lease had already ended (kept by the cluster as a stale report)", "job_id", t.job.ID, "token", t.job.Token)
	case t.lease.Err() != nil:
		w.log.Warn("lease lost while reporting", "job_id", t.job.ID, "token", t.job.Token, "error", err)
	default:
		w.log.Error("report failed", "job_id", t.job.ID, "token", t.job.Token, "error", err)
	}
}

// nextLocked is the acquire a report carries for the lease that takes the
// reported one's slot: set when the acquire loop waits for room (it has no
// acquire in flight), so a busy worker takes its next job in the call that
// reports the last. Nil when the worker must not acquire (stopped, self-
// stopped) or its loop is already asking.
func (w *Worker) nextLocked() *leaseholdv1.AcquireRequest {
	if w.acquiring != "" || w.selfStopped || w.soft == nil || w.soft.Err() != nil {
		return nil
	}
	// The reporting task's own slot, and those of tasks whose reports
	// were answered but which have not yet left w.tasks (a report's next
	// job can finish and report before the task it replaced has gone).
	room := w.capacity - (len(w.tasks) - w.answered) + 1 - len(w.nexts)
	if room <= 0 {
		return nil
	}
	next := &leaseholdv1.AcquireRequest{
		WorkerId:  w.id,
		RequestId: newID(),
		Queues:    w.queues,
		Kinds:     w.kinds,
		Max:       uint32(min(room, rules.MaxAcquireBatch)),
		Start:     true,
	}
	w.nexts[next.RequestId] = true
	return next
}

// reportNext sends a report, and its next acquire when it has one, whose
// grants it admits as the acquire loop does its own.
func (w *Worker) reportNext(ctx context.Context, t *task, req *leaseholdv1.ReportRequest) (*leaseholdv1.ReportResponse, error) {
	next := req.Next
	var nextDone func(proto.Message, error)
	if next != nil {
		w.mu.Lock()
		w.nexts[next.RequestId] = true // again, when the report is sent again
		w.mu.Unlock()
	}
	done := w.observer.observe("Report", req)
	if next != nil {
		nextDone = w.observer.observe("Acquire", next)
	}
	resp, err := w.c.Report(ctx, req)
	ended(done, resp, err)
	if next == nil {
		if err == nil {
			w.mu.Lock()
			w.answeredLocked(t)
			w.mu.Unlock()
		}
		return resp, err
	}
	granted := resp.GetNext()
	if err == nil && granted == nil {
		granted = &leaseholdv1.AcquireResponse{} // a server from before next: nothing acquired
	}
	ended(nextDone, granted, err)
	// Clearing the in-flight id and adding the grants happen under one
	// lock, so a heartbeat reply never sees a granted lease as unknown.
	w.mu.Lock()
	delete(w.nexts, next.RequestId)
	if err == nil {
		w.answeredLocked(t)
		w.admitLocked(w.soft, granted.GetGrants())
	}
	w.mu.Unlock()
	return resp, err
}

// answeredLocked counts t's slot free: the cluster answered its report.
func (w *Worker) answeredLocked(t *task) {
	if !t.answered {
		t.answered = true
		w.answered++
	}
}

// release gives a lease back and waits for the answer.
func (w *Worker) release(jobID string, token uint64, reason string) {
	done := w.observer.observe("Release", &leaseholdv1.ReleaseRequest{WorkerId: w.id, JobId: jobID, Token: token, Reason: reason})
	job, err := w.c.Release(w.hard, w.id, jobID, token, reason)
	ended(done, &leaseholdv1.ReleaseResponse{Job: job}, err)
	if err != nil {
		if errors.Is(err, ErrStaleToken) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrJobFinished) {
			w.log.Debug("lease already ended", "job_id", jobID, "token", token)
			return
		}
		w.log.Error("release failed", "job_id", jobID, "token", token, "error", err)
		return
	}
	w.log.Info("lease released", "job_id", jobID, "token", token, "reason", reason)
}

// settleLost ends a task's lease as a lost worker's (ErrExecutionLost). A
// cluster whose voters cannot all apply that yet gets a failure report
// instead, which at least never runs a run-style job again.
func (w *Worker) settleLost(t *task, herr, cause error) {
	reason := clip(strings.ToValidUTF8(herr.Error(), "\uFFFD"), rules.MaxMessageLen)
	req := &leaseholdv1.ReleaseRequest{WorkerId: w.id, JobId: t.job.ID, Token: t.job.Token, Reason: reason, Lost: true}
	w.mu.Lock()
	bound := w.timings.toleration
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.lease, bound)
	defer cancel()
	done := w.observer.observe("Release", req)
	job, err := w.c.ReleaseAsLost(ctx, w.id, t.job.ID, t.job.Token, reason)
	ended(done, &leaseholdv1.ReleaseResponse{Job: job}, err)
	switch {
	case err == nil:
		w.log.Warn("execution lost; lease settled as a lost worker's", "job_id", t.job.ID, "token", t.job.Token, "state", job.GetState(), "why", reason)
	case errors.Is(err, ErrUpgradeRequired) || refusedField(err, "5", "lost"):
		// A voter cannot apply it yet, or a node of a build from before
		// it refused the field outright.
		w.log.Warn("the cluster cannot settle a lease as lost yet (a voter runs an older build); reporting a failure", "job_id", t.job.ID, "token", t.job.Token)
		w.report(t, Result{Outcome: leaseholdv1.Outcome_OUTCOME_FAILED, Message: reason}, nil, cause)
	case errors.Is(err, ErrStaleToken) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrJobFinished):
		w.log.Debug("lease already ended", "job_id", t.job.ID, "token", t.job.Token)
	default:
		w.log.Error("settling a lost execution failed", "job_id", t.job.ID, "token", t.job.Token, "error", err)
	}
}

// releaseLocked releases a lease the worker is not running, in the
// background, once at a time per token.
func (w *Worker) releaseLocked(jobID string, token uint64, reason string) {
	if w.releasing[token] {
		return
	}
	w.releasing[token] = true
	w.work.Add(1)
	go func() {
		defer w.work.Done()
		w.release(jobID, token, reason)
		w.mu.Lock()
		delete(w.releasing, token)
		w.mu.Unlock()
	}()
}
