package client

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// errBeatDue: a heartbeat was abandoned because the next one was due.
var errBeatDue = errors.New("next heartbeat due")

// heartbeatLoop sends one heartbeat per renew, naming every lease the
// worker holds. Each is bounded by the next: when the next comes due, the
// one in flight is abandoned and the new one, with a fresh send time, goes
// out at once.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	tick := w.clock.NewTimer(w.renew())
	defer func() { tick.Stop() }()
	due := false
	for {
		if !due {
			select {
			case <-tick.C():
			case <-ctx.Done():
				return
			}
		}
		// The send time is read before sending: the server's deadline for
		// this worker runs from the request's arrival, never earlier.
		sent := w.clock.Now()
		refs := w.heldLeases()
		tick = w.clock.NewTimer(w.renew())
		var resp *leaseholdv1.HeartbeatResponse
		var err error
		resp, due, err = w.beat(ctx, tick, refs)
		switch {
		case err == nil:
			w.acknowledge(sent, resp)
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrUnknownWorker):
			w.reregister(ctx)
		default:
			w.log.Warn("heartbeat failed", "error", err, "leases", len(refs))
		}
	}
}

// beat makes one heartbeat call, abandoning it when next fires; due
// reports that it did. Attempts get half a renew each, so a node that hangs
// (paused, not dead) makes the client move on to another node within this
// heartbeat rather than have every heartbeat abandoned on it.
func (w *Worker) beat(ctx context.Context, next Timer, refs []*leaseholdv1.LeaseRef) (resp *leaseholdv1.HeartbeatResponse, due bool, err error) {
	perAttempt := w.renew() / 2
	bctx, cancel := context.WithCancel(unbounded(ctx))
	defer cancel()
	type answer struct {
		resp *leaseholdv1.HeartbeatResponse
		err  error
	}
	done := make(chan answer, 1)
	observed := w.observer.observe("Heartbeat", &leaseholdv1.HeartbeatRequest{WorkerId: w.id, Leases: refs})
	go func() {
		r, err := w.c.heartbeat(bctx, w.id, refs, perAttempt)
		ended(observed, r, err)
		done <- answer{r, err}
	}()
	select {
	case a := <-done:
		return a.resp, false, a.err
	case <-next.C():
		cancel()
		<-done
		return nil, true, errBeatDue
	case <-ctx.Done():
		cancel()
		<-done
		return nil, false, ctx.Err()
	}
}

// heldLeases names every lease the worker holds, in token order.
func (w *Worker) heldLeases() []*leaseholdv1.LeaseRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	refs := make([]*leaseholdv1.LeaseRef, 0, len(w.tasks))
	for _, t := range w.tasks {
		refs = append(refs, &leaseholdv1.LeaseRef{JobId: t.job.ID, Token: t.job.Token})
	}
	slices.SortFunc(refs, func(a, b *leaseholdv1.LeaseRef) int { return cmp.Compare(a.Token, b.Token) })
	return refs
}

// acknowledge applies an acknowledged heartbeat sent at sent: it moves the
// self-stop deadline, applies the verdicts, and releases live leases the
// worker did not know it held.
func (w *Worker) acknowledge(sent time.Time, resp *leaseholdv1.HeartbeatResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if resp.GetTimings() != nil {
		if t, err := parseTimings(resp.GetTimings()); err == nil {
			w.timings = t
		}
	}
	if sent.After(w.lastAck) {
		w.lastAck = sent
		w.observer.acknowledged(sent)
	}
	if w.selfStopped && w.clock.Now().Before(w.deadlineLocked()) {
		w.selfStopped = false
		w.log.Info("heartbeat acknowledged again; taking jobs")
	}
	broadcast(&w.acked)
	w.log.Debug("heartbeat acknowledged", "leases", len(resp.GetLeases()))

	for _, st := range resp.GetLeases() {
		t := w.tasks[st.GetToken()]
		if t == nil || t.job.ID != st.GetJobId() {
			continue // ended meanwhile
		}
		switch st.GetVerdict() {
		case leaseholdv1.Verdict_VERDICT_STOP:
			if t.ctx.Err() == nil {
				kill := st.GetRevoke() == leaseholdv1.Revoke_REVOKE_KILL
				w.log.Info("job revoked; stopping it", "job_id", t.job.ID, "token", t.job.Token, "kill", kill)
				t.cancel(&RevokedError{Kill: kill})
			}
		case leaseholdv1.Verdict_VERDICT_LOST:
			w.loseLocked(t, "the cluster says the lease is not live")
		}
	}

	if !w.reattached {
		return // re-attach decides about the leases found at start
	}
	for _, l := range resp.GetUnnamed() {
		token := l.GetToken()
		if _, ok := w.tasks[token]; ok || token == 0 {
			continue
		}
		if l.GetRequestId() != "" && l.GetRequestId() == w.acquiring {
			continue // granted to the acquire in flight: its answer brings it
		}
		w.log.Warn("releasing a lease the worker does not hold", "job_id", l.GetJobId(), "token", token)
		w.releaseLocked(l.GetJobId(), token, "the worker does not hold this lease")
	}
}

// deadlineLocked is the self-stop deadline: two heartbeats before the
// server could expire the worker's leases.
func (w *Worker) deadlineLocked() time.Time {
	return w.lastAck.Add(w.timings.toleration - 2*w.timings.renew)
}

// watchdog stops every job when the worker's clock passes the self-stop
// deadline. It keeps one timer armed to the deadline, re-armed at each
// acknowledgement; when it fires with no ack since, the deadline has
// passed.
func (w *Worker) watchdog(ctx context.Context) {
	for {
		w.mu.Lock()
		deadline := w.deadlineLocked()
		acked := w.acked
		w.mu.Unlock()
		if d := deadline.Sub(w.clock.Now()); d > 0 {
			t := w.clock.NewTimer(d)
			select {
			case <-t.C():
			case <-acked:
				t.Stop()
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		w.selfStop(deadline)
		select {
		case <-acked:
		case <-ctx.Done():
			return
		}
	}
}

// selfStop cancels every handler with ErrLeaseLost, abandons the acquire
// in flight, and stops acquiring until a heartbeat is acknowledged.
func (w *Worker) selfStop(deadline time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.selfStopped {
		return
	}
	w.selfStopped = true
	w.observer.selfStopped(deadline)
	w.log.Error("heartbeats unacknowledged too long; stopping every job before its lease can expire",
		"last_ack", w.lastAck, "deadline", deadline, "jobs", len(w.tasks))
	for _, t := range w.tasks {
		w.loseLocked(t, "self-stop")
	}
	if w.stopAcquire != nil {
		w.stopAcquire()
	}
}
