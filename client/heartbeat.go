package client

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/clock"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

// beatDueError: a heartbeat was abandoned because the next one was due.
// It carries why the abandoned one had no answer, so the log says what
// went wrong rather than only that time ran out.
type beatDueError struct{ last error }

func (e *beatDueError) Error() string {
	if e.last == nil {
		return "no answer before the next heartbeat was due"
	}
	return e.last.Error() + " (no answer before the next heartbeat was due)"
}

func (e *beatDueError) Unwrap() error { return e.last }

// abandoned is the error of a heartbeat call cut off by the next beat:
// the last attempt's failure when there was one, without the cancellation
// that ended it.
func abandoned(err error) error {
	var re *retryError
	if errors.As(err, &re) {
		return &beatDueError{last: re.last}
	}
	if err == nil || errors.Is(err, context.Canceled) {
		return &beatDueError{}
	}
	return &beatDueError{last: err}
}

// errStreamEnded: a heartbeat sent on a stream had no answer when the
// worker stopped heartbeating (shutdown, or falling back to unary calls).
var errStreamEnded = errors.New("heartbeat stream ended")

// heartbeatLoop sends one heartbeat per renew, naming every lease the
// worker holds, over a heartbeat stream; on a cluster that cannot serve the
// stream (an older server, a hop that does not speak HTTP/2), with one
// unary call each for the rest of the run.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	if w.streamBeats(ctx) {
		w.unaryBeats(ctx, true)
	}
}

// sentBeat is a heartbeat of the stream awaiting its result.
type sentBeat struct {
	seq  uint64
	sent time.Time
	beat beatLeases
	done func(proto.Message, error) // the Observer's
}

// streamBeats heartbeats over a HeartbeatStream until ctx ends (false) or
// the stream is not served (true: fall back to unary calls). A beat is
// sent every renew whatever became of the previous one; an answer counts
// from the send time of the beat it answers (the stream matches answers to
// the beats sent on the same connection). A beat still unanswered when the
// next is due means the node stopped answering: the stream gives the
// connection up and reconnects, as a unary call moves on from a node that
// hangs.
func (w *Worker) streamBeats(ctx context.Context) (fallback bool) {
	s := w.c.HeartbeatStream(ctx)
	var inflight []sentBeat
	// again: a beat was refused for its notes; the next goes at once,
	// without them (the refused one renewed nothing).
	again := false
	defer func() {
		s.Close()
		for _, b := range inflight {
			b.done(nil, errStreamEnded)
		}
	}()
	// result applies one beat's result; false ends the loop (fallback
	// tells why).
	result := func(r HeartbeatResult) bool {
		i := slices.IndexFunc(inflight, func(b sentBeat) bool { return b.seq == r.Seq })
		if i < 0 {
			return true
		}
		b := inflight[i]
		inflight = slices.Delete(inflight, i, i+1)
		ended(b.done, r.Response, r.Err)
		switch {
		case r.Err == nil:
			w.acknowledge(b.sent, r.Response, b.beat)
		case ctx.Err() != nil:
			return false
		case len(b.beat.notes) > 0 && notesRefused(r.Err):
			w.refuseNotes(r.Err)
			again = true
		case streamUnsupported(r.Err):
			w.log.Warn("the cluster does not serve heartbeat streams; heartbeating with one call each", "error", r.Err)
			fallback = true
			return false
		case errors.Is(r.Err, ErrUnknownWorker):
			w.reregister(ctx)
		case errors.Is(r.Err, ErrSuperseded):
		default:
			w.log.Warn("heartbeat failed", "error", r.Err, "leases", len(b.beat.refs))
		}
		return true
	}
	tick := w.clock.NewTimer(w.renew())
	defer func() { tick.Stop() }()
	for {
		select {
		case <-tick.C():
			// Answers that arrived with the tick count first.
			for drained := false; !drained; {
				select {
				case r, ok := <-s.Results():
					if !ok || !result(r) {
						return fallback
					}
				default:
					drained = true
				}
			}
			if len(inflight) > 0 {
				s.Reset() // unanswered for a whole renew
			}
			// The send time is read before sending: the server's deadline
			// for this worker runs from the beat's arrival, never earlier.
			again = false
			sent := w.clock.Now()
			beat := w.heldLeases()
			tick = w.clock.NewTimer(w.renew())
			done := w.observer.observe("Heartbeat", &leaseholdv1.HeartbeatRequest{WorkerId: w.id, Leases: beat.refs, Notes: beat.notes})
			seq, err := s.Send(w.id, beat.refs, beat.notes...)
			if err != nil {
				done(nil, err)
				return false // the stream ends only with ctx or the Client
			}
			inflight = append(inflight, sentBeat{seq: seq, sent: sent, beat: beat, done: done})
		case r, ok := <-s.Results():
			if !ok || !result(r) {
				return fallback
			}
			if again {
				tick.Stop()
				tick = w.clock.NewTimer(0)
			}
		case <-ctx.Done():
			return false
		}
	}
}

// streamUnsupported: a stream's beat failed with an answer no retry fixes
// and that carries no reason of leasehold's: the method is unknown
// (UNIMPLEMENTED: an older server, or an HTTP/1.x connection), or
// something between client and cluster refused it.
func streamUnsupported(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code == connect.CodeUnimplemented || e.Reason == "" && classify(e) == giveUp
}

// unaryBeats sends one heartbeat call per renew, the first at once when due
// is set. Each is bounded by the next: when the next comes due, the one in
// flight is abandoned and the new one, with a fresh send time, goes out at
// once.
func (w *Worker) unaryBeats(ctx context.Context, due bool) {
	tick := w.clock.NewTimer(w.renew())
	defer func() { tick.Stop() }()
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
		beat := w.heldLeases()
		tick.Stop()
		tick = w.clock.NewTimer(w.renew())
		var resp *leaseholdv1.HeartbeatResponse
		var err error
		resp, due, err = w.beat(ctx, tick, beat)
		switch {
		case err == nil:
			w.acknowledge(sent, resp, beat)
		case ctx.Err() != nil:
			return
		case len(beat.notes) > 0 && notesRefused(err):
			// Renew at once, without the notes.
			w.refuseNotes(err)
			due = true
		case errors.Is(err, ErrUnknownWorker):
			w.reregister(ctx)
		default:
			w.log.Warn("heartbeat failed", "error", err, "leases", len(beat.refs))
		}
	}
}

// beat makes one heartbeat call, abandoning it when next fires; due
// reports that it did. Attempts get half a renew each, so a node that hangs
// (paused, not dead) makes the client move on to another node within this
// heartbeat rather than have every heartbeat abandoned on it.
func (w *Worker) beat(ctx context.Context, next clock.Timer, beat beatLeases) (resp *leaseholdv1.HeartbeatResponse, due bool, err error) {
	perAttempt := w.renew() / 2
	bctx, cancel := context.WithCancel(unbounded(ctx))
	defer cancel()
	type answer struct {
		resp *leaseholdv1.HeartbeatResponse
		err  error
	}
	done := make(chan answer, 1)
	observed := w.observer.observe("Heartbeat", &leaseholdv1.HeartbeatRequest{WorkerId: w.id, Leases: beat.refs, Notes: beat.notes})
	go func() {
		r, err := w.c.heartbeat(bctx, w.id, beat.refs, beat.notes, perAttempt)
		ended(observed, r, err)
		done <- answer{r, err}
	}()
	select {
	case a := <-done:
		return a.resp, false, a.err
	case <-next.C():
		cancel()
		a := <-done
		return nil, true, abandoned(a.err)
	case <-ctx.Done():
		cancel()
		<-done
		return nil, false, ctx.Err()
	}
}

// beatLeases is what one heartbeat says: every lease the worker holds, in
// token order, and the progress notes no acknowledged beat has carried yet
// (with the version of each, by index).
type beatLeases struct {
	refs  []*leaseholdv1.LeaseRef
	notes []*leaseholdv1.ProgressNote
	vers  []uint64
}

// heldLeases says what the next heartbeat names: every lease, and each
// lease's latest progress note until a beat carrying it is acknowledged
// by the current leader's term, when the server takes notes. So a note
// goes with every beat until one is acknowledged, again after a change of
// leader, and never in a call of its own.
func (w *Worker) heldLeases() beatLeases {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := beatLeases{refs: make([]*leaseholdv1.LeaseRef, 0, len(w.tasks))}
	for _, t := range w.tasks {
		b.refs = append(b.refs, &leaseholdv1.LeaseRef{JobId: t.job.ID, Token: t.job.Token})
	}
	slices.SortFunc(b.refs, func(a, b *leaseholdv1.LeaseRef) int { return cmp.Compare(a.Token, b.Token) })
	if w.notesTerm == 0 {
		return b
	}
	// Notes take at most noteBudget bytes of a beat, so a worker of many
	// leases never makes a heartbeat too large to be taken; the first
	// lease considered turns with each beat, so none waits for ever.
	budget := noteBudget
	w.noteTurn++
	for i := range b.refs {
		r := b.refs[(i+w.noteTurn)%len(b.refs)]
		t := w.tasks[r.Token]
		if t.noteVer <= t.ackedVer {
			continue
		}
		if budget -= len(t.note) + noteOverhead; budget < 0 {
			break
		}
		b.notes = append(b.notes, &leaseholdv1.ProgressNote{Token: r.Token, Note: t.note})
		b.vers = append(b.vers, t.noteVer)
	}
	return b
}

// noteBudget bounds the bytes of progress notes in one heartbeat (the
// notes of 128 leases at the longest); noteOverhead is what a note costs
// on the wire besides its text, at most.
const (
	noteBudget   = 128 * (rules.MaxProgressLen + noteOverhead)
	noteOverhead = 16
)

// noteAcksLocked applies an acknowledged beat's answer to the notes: the
// notes it carried are held by the leader of term; a leader of another
// term than the last holds none of the earlier ones, so each lease's latest
// note goes again.
func (w *Worker) noteAcksLocked(term uint64, beat beatLeases) {
	if term != w.notesTerm {
		for _, t := range w.tasks {
			t.ackedVer = 0
			if t.note == "" {
				t.ackedVer = t.noteVer // nothing to clear on a new leader
			}
		}
		w.notesTerm = term
	}
	if term == 0 {
		return
	}
	for i, n := range beat.notes {
		if t := w.tasks[n.GetToken()]; t != nil && beat.vers[i] > t.ackedVer {
			t.ackedVer = beat.vers[i]
		}
	}
}

// notesRefused reports whether err is a strict server's refusal of a
// heartbeat's notes as an unknown field: a leader of a build from before
// them (in a stream, the field is the beat's).
func notesRefused(err error) bool {
	return refusedField(err, "3", "notes") || refusedField(err, "heartbeat.3", "heartbeat.notes")
}

// refuseNotes stops sending progress notes until a heartbeat's answer
// says the server takes them (the leader moved to a node of an older
// build during an upgrade).
func (w *Worker) refuseNotes(err error) {
	w.mu.Lock()
	w.notesTerm = 0
	w.mu.Unlock()
	w.log.Info("the leader does not take progress notes; heartbeating without them", "error", err)
}

// acknowledge applies an acknowledged heartbeat sent at sent: it moves the
// self-stop deadline, applies the verdicts, and releases live leases the
// worker did not know it held.
func (w *Worker) acknowledge(sent time.Time, resp *leaseholdv1.HeartbeatResponse, beat beatLeases) {
	w.mu.Lock()
	w.noteAcksLocked(resp.GetNotesTerm(), beat)
	w.acknowledgeLocked(sent, resp)
	deadline := w.deadlineLocked()
	w.mu.Unlock()
	w.publishDeadline(deadline)
}

// publishDeadline tells WorkerOptions.Deadline the self-stop deadline.
// Registration and the heartbeat loop call it, one after the other, never
// under the lock (the hook may write a file).
func (w *Worker) publishDeadline(deadline time.Time) {
	if w.deadlineFn != nil {
		w.deadlineFn(deadline)
	}
}

func (w *Worker) acknowledgeLocked(sent time.Time, resp *leaseholdv1.HeartbeatResponse) {
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
			kill := st.GetRevoke() == leaseholdv1.Revoke_REVOKE_KILL
			if t.ctx.Err() == nil {
				w.log.Info("job revoked; stopping it", "job_id", t.job.ID, "token", t.job.Token, "kill", kill)
				t.cancel(&RevokedError{Kill: kill})
			} else if kill && !t.killClosed {
				w.log.Info("job killed while stopping; stopping it now", "job_id", t.job.ID, "token", t.job.Token)
			}
			if kill {
				t.killLocked()
			}
		case leaseholdv1.Verdict_VERDICT_LOST:
			if t.reporting {
				// The handler has returned and the report in flight
				// settles the lease: the beat may have found it ended by
				// that very report, and cancelling the call would drop the
				// next lease its answer brings.
				continue
			}
			w.loseLocked(t, "the cluster says the lease is not live")
		}
	}

	for token, at := range w.ended {
		if at.Before(w.lastAck.Add(-w.timings.renew)) {
			delete(w.ended, token) // answers to beats that old are not awaited
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
		if at, ok := w.ended[token]; ok && !at.Before(sent) {
			// Held when the beat was sent, and let go (reported, released)
			// before its answer came: the answer is older than that.
			continue
		}
		if id := l.GetRequestId(); id != "" && (id == w.acquiring || w.nexts[id]) {
			continue // granted to an acquire in flight: its answer brings it
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
	if !selfStop {
		// The broken chaos_noselfstop build: no watchdog.
		<-ctx.Done()
		return
	}
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
	now := w.clock.Now()
	w.log.Error("heartbeats unacknowledged too long; stopping every job before its lease can expire",
		"last_ack", wallTime(w.lastAck, now), "since_last_ack", now.Sub(w.lastAck).Round(time.Millisecond),
		"deadline", wallTime(deadline, now), "jobs", len(w.tasks))
	for _, t := range w.tasks {
		w.loseLocked(t, "self-stop")
	}
	if w.stopAcquire != nil {
		w.stopAcquire()
	}
}

// wallTime turns a reading of the worker's clock into the wall-clock time it
// stands for, as of now (a reading of the same clock), for logs: the
// suspend-aware clock counts from boot, so its readings printed as times
// are dates in 1970.
func wallTime(reading, now time.Time) string {
	return time.Now().Add(reading.Sub(now)).Format(time.RFC3339Nano)
}
