package fsm

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Handlers for the commands that grant, advance and end leases. Each one
// checks everything before it changes anything, so a refusal leaves the
// state as it was (save the event some refusals record).

func applyAcquire(s *state, cmd Command) (any, error) {
	c := cmd.(*Acquire)
	w, ok := s.workers[c.WorkerID]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownWorker, c.WorkerID)
	}
	if res, ok := s.replayAcquire(c.WorkerID, c.RequestID); ok {
		return res, nil
	}
	held := uint32(len(s.workerLeases[c.WorkerID]))
	if held >= w.Capacity {
		return AcquireResult{}, nil
	}
	n := min(c.Max, w.Capacity-held)
	if s.lastToken > math.MaxUint64-uint64(n) {
		return nil, ErrTokensExhausted
	}
	heaps := s.candidateHeaps(c.Queues, c.Kinds)
	var res AcquireResult
	var granted requestTokens // the request index's entry (state.go)
	var block []Lease         // the grants' copies of their jobs' leases (Job.exportIn)
	for i := range n {
		seq, ok := s.pickReady(heaps)
		if !singleGrant && i == 0 {
			if dseq, dok := s.doubleGrantable(w.ID, c.Queues, c.Kinds); dok {
				seq, ok = dseq, true
			}
		}
		if !ok {
			break
		}
		if res.Grants == nil {
			// Sized once, for at most the jobs the heaps hold, rather
			// than grown by doubling.
			room := min(int(n), readyBound(heaps))
			res.Grants, block = make([]Grant, 0, room), make([]Lease, 0, room)
		}
		j := s.editJob(seq)
		since := readySince(j)
		if !singleGrant && j.State != JobQueued {
			// The broken build takes the job over: its holder is not
			// told, no event says the lease ended.
			s.endLease(j, LeaseExpired)
		}
		s.lastToken++
		l := Lease{
			Token: s.lastToken, WorkerID: w.ID, RequestID: c.RequestID,
			State: LeaseActive, GrantedAt: s.lastTime,
		}
		to := JobAcquired
		if c.Start {
			to, l.StartedAt = JobRunning, s.lastTime
		}
		s.addLease(j, l, int(held+n))
		if granted.kept == 0 {
			granted.first = l.Token
		}
		granted.span, granted.kept = uint16(l.Token-granted.first), granted.kept+1
		s.setState(j, to)
		j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
		s.emit(Event{Type: EventLeaseAcquired, JobID: j.ID, Token: l.Token, WorkerID: w.ID})
		if c.Start {
			s.emit(Event{Type: EventLeaseStarted, JobID: j.ID, Token: l.Token, WorkerID: w.ID})
		}
		res.Grants = append(res.Grants, Grant{Job: j.exportIn(&block), Lease: l, ReadySince: since})
	}
	if granted.kept > 0 {
		s.requests[requestKey{w.ID, c.RequestID}] = granted
	}
	return res, nil
}

// readyBound is at least the number of jobs heaps may grant: the queued
// jobs they hold (some not yet ready, or in paused queues), at least 1.
func readyBound(heaps []readyHeap) int {
	n := 0
	for _, rh := range heaps {
		n += rh.h.live
	}
	return max(n, 1)
}

// doubleGrantable (the broken chaos_doublegrant build only) is the job of
// the live lease with the smallest token that another worker holds, on a
// job leased once, of the queues and kinds asked for.
func (s *state) doubleGrantable(worker string, queues, kinds []string) (uint64, bool) {
	var best, bestSeq uint64
	for w, set := range s.workerLeases {
		if w == worker {
			continue
		}
		for _, e := range set {
			tok, j := e.token, s.job(e.seq)
			if j == nil || len(j.Leases()) != 1 || (best != 0 && tok > best) || !slices.Contains(queues, j.Queue) ||
				(len(kinds) > 0 && !slices.Contains(kinds, j.Kind)) {
				continue
			}
			best, bestSeq = tok, e.seq
		}
	}
	return bestSeq, best != 0
}

// replayAcquire returns the grants of an acquire already served for this
// worker and request id.
func (s *state) replayAcquire(worker, request string) (AcquireResult, bool) {
	rt, ok := s.requests[requestKey{worker, request}]
	if !ok {
		return AcquireResult{}, false
	}
	res := AcquireResult{Replayed: true}
	// The kept leases in the acquire's range of tokens, in token order; a
	// token another acquire holds (only a broken chaos build reuses
	// tokens) is not this one's.
	for tok, seq := range s.tokens.keptIn(rt.first, rt.last()) {
		j := s.job(seq)
		if l := findLease(j, tok); l != nil && l.WorkerID == worker && l.RequestID == request {
			res.Grants = append(res.Grants, Grant{Job: j.export(), Lease: *l})
		}
	}
	return res, true
}

// readyHeap is a ready heap and the queue it belongs to.
type readyHeap struct {
	queue string
	h     *jobHeap
}

// candidateHeaps returns the ready heaps an acquire may pick from.
func (s *state) candidateHeaps(queues, kinds []string) []readyHeap {
	var out []readyHeap
	for _, q := range queues {
		byKind := s.ready[q]
		if len(kinds) == 0 {
			for _, h := range byKind {
				out = append(out, readyHeap{q, h})
			}
			continue
		}
		for _, k := range kinds {
			if h := byKind[k]; h != nil {
				out = append(out, readyHeap{q, h})
			}
		}
	}
	return out
}

// pickReady returns the best queued job across heaps, skipping the queues
// that are paused or at their limit (queues.go), which each grant may
// change; granting it a lease takes it out of the queue. The order is
// total (priority, then seq), so the heaps' order does not matter.
func (s *state) pickReady(heaps []readyHeap) (uint64, bool) {
	var best heapItem
	found := false
	for _, rh := range heaps {
		if !s.queueOpen(rh.queue) {
			continue
		}
		if it, ok := rh.h.peek(s.isReady); ok && (!found || it.before(best)) {
			best, found = it, true
		}
	}
	return best.seq, found
}

func findLease(j *Job, tok uint64) *Lease {
	for i, ls := 0, j.Leases(); i < len(ls); i++ {
		if ls[i].Token == tok {
			return &ls[i]
		}
	}
	return nil
}

// checkGranted refuses a token above every token this state has granted
// or set as a floor. Such a token names no lease, past or present: it is
// made up, not late, and is refused as an invalid argument without an
// event, or anyone could push the real events out of the log with it. A
// token at or below the counter may be a late report on a job long
// compacted (or on the cluster a backup came from): that one is recorded.
func (s *state) checkGranted(tok uint64) error {
	if tok > s.lastToken {
		return invalid("token", "%d was never granted: no token above %d has been", tok, s.lastToken)
	}
	return nil
}

// checkLive finds the live lease (job, token) for an action by worker. A
// token that is not the job's live lease is stale: the refusal is recorded
// with ev (which names the action) and ErrStaleToken returned. A token
// never granted is refused first, unrecorded.
func (s *state) checkLive(worker, jobID string, tok uint64, ev Event) (*Job, error) {
	if err := s.checkGranted(tok); err != nil {
		return nil, err
	}
	j := s.jobByID(jobID)
	if j == nil || liveLease(j, tok) == nil {
		ev.JobID, ev.Token, ev.WorkerID = jobID, tok, worker
		s.emit(ev)
		return nil, fmt.Errorf("%w: job %s token %d", ErrStaleToken, jobID, tok)
	}
	if owner := j.lastLease().WorkerID; owner != worker {
		return nil, fmt.Errorf("%w: job %s token %d", ErrNotOwner, jobID, tok)
	}
	return j, nil
}

func applyStart(s *state, cmd Command) (any, error) {
	c := cmd.(*Start)
	j, err := s.checkLive(c.WorkerID, c.JobID, c.Token, Event{Type: EventStaleAction, Detail: "start"})
	if err != nil {
		return nil, err
	}
	if j.State == JobRunning {
		return HeldLease{Lease: *j.lastLease(), JobID: j.ID}, nil
	}
	j = s.editJob(j.Seq)
	l := j.lastLease()
	l.StartedAt = s.lastTime
	s.setState(j, JobRunning)
	j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
	s.emit(Event{Type: EventLeaseStarted, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID})
	return HeldLease{Lease: *l, JobID: j.ID}, nil
}

func applyReport(s *state, cmd Command) (any, error) {
	c := cmd.(*Report)
	if err := s.checkGranted(c.Token); err != nil {
		return nil, err
	}
	if j := s.jobByID(c.JobID); j != nil {
		if l := findLease(j, c.Token); l != nil && l.State == LeaseReported && (reportIDIdempotent || l.ReportID() != c.ReportID) {
			return s.reportAgain(j, l, c)
		}
	}
	j, err := s.checkLive(c.WorkerID, c.JobID, c.Token, Event{
		Type: EventStaleReport, Ref: c.Ref, Detail: c.Outcome.String(),
	})
	if err != nil {
		return nil, err
	}
	j = s.editJob(j.Seq)
	l := s.endLease(j, LeaseReported)
	l.Outcome, l.Retryable = c.Outcome, c.Retryable
	l.setReport(c.ReportID, c.Ref, c.Message)
	if l.Revoke == RevokeTimeout {
		return s.reportTimedOut(j, l, c.Outcome), nil
	}
	requeue := false
	var delay int64
	if c.Outcome == OutcomeFailed {
		j.Attempts++
		requeue = c.Retryable && j.Attempts < j.MaxAttempts && l.Revoke == RevokeNone
	}
	if requeue {
		switch {
		case c.RetryAfter > 0: // the worker's own delay (a snooze)
			delay = c.RetryAfter
		case j.Retry != nil:
			delay = j.Retry.retryDelay(j.ID, j.Attempts)
		}
		s.requeueAfter(j, delay)
	}
	j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
	s.emit(Event{Type: EventLeaseReported, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID, Ref: c.Ref, Detail: c.Outcome.String()})
	// A retryable failure out of attempts ends dead from level 6 (after
	// the report's event: job.dead follows lease.reported); a failure that
	// is not retryable is the worker's final word and ends reported.
	switch {
	case requeue:
	case c.Outcome == OutcomeFailed && c.Retryable && l.Revoke == RevokeNone && s.exhausted(j, outOfAttempts(j, c.Message)):
	default:
		s.setState(j, JobReported)
	}
	l.Answer = j.State
	switch {
	case requeue && delay > 0:
		s.emit(Event{Type: EventRetryScheduled, JobID: j.ID, Token: l.Token,
			Detail: fmt.Sprintf("retryable failure; retry in %s, not before %s", time.Duration(delay), formatTime(j.NotBefore))})
	case requeue:
		s.emit(Event{Type: EventJobRequeued, JobID: j.ID, Token: l.Token, Detail: "retryable failure"})
	}
	return reportResult(j, l), nil
}

// requeueAfter queues a job again, not before delay from now (zero: at
// once).
func (s *state) requeueAfter(j *Job, delay int64) {
	if delay > 0 {
		if !j.timed() {
			s.timed++
		}
		j.NotBefore = s.lastTime + delay // before it enters the queue: it waits
	}
	s.setState(j, JobQueued)
}

// reportAgain answers a report on an already reported lease: the same report
// id gets the first answer; another one is a recorded conflict.
func (s *state) reportAgain(j *Job, l *Lease, c *Report) (any, error) {
	if l.WorkerID != c.WorkerID {
		return nil, fmt.Errorf("%w: job %s token %d", ErrNotOwner, j.ID, l.Token)
	}
	if l.ReportID() == c.ReportID {
		return reportResult(j, l), nil
	}
	s.emit(Event{
		Type: EventReportConflict, JobID: j.ID, Token: l.Token, WorkerID: c.WorkerID, Ref: c.Ref,
		Detail: fmt.Sprintf("report %s conflicts with report %s", c.ReportID, l.ReportID()),
	})
	return nil, fmt.Errorf("%w: lease %d was already reported by report %s", ErrConflict, l.Token, l.ReportID())
}

func reportResult(j *Job, l *Lease) ReportResult {
	return ReportResult{
		JobID: j.ID, Token: l.Token, Outcome: l.Outcome, State: l.Answer,
		Requeued: l.Answer == JobQueued, Queue: j.Queue, Ran: l.EndedAt - l.GrantedAt,
	}
}

func applyRelease(s *state, cmd Command) (any, error) {
	c := cmd.(*Release)
	j, err := s.checkLive(c.WorkerID, c.JobID, c.Token, Event{Type: EventStaleAction, Detail: "release"})
	if err != nil {
		return nil, err
	}
	j = s.editJob(j.Seq)
	if c.Lost {
		s.expireLease(j, lostReason(c.Reason))
	} else {
		s.releaseLease(j, c.Reason)
	}
	return j.export(), nil
}

// lostReason is the expiry event's detail for a lease its worker settled
// as lost.
func lostReason(reason string) string {
	if reason == "" {
		return "settled as lost by its worker"
	}
	return "settled as lost by its worker: " + reason
}

// releaseLease ends a job's live lease without an attempt: the job is queued
// again, or cancelled if a revoke was pending.
func (s *state) releaseLease(j *Job, reason string) {
	l := s.endLease(j, LeaseReleased)
	s.emit(Event{Type: EventLeaseReleased, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID, Detail: reason})
	switch {
	case l.Revoke == RevokeTimeout:
		countTimeout(j, l)
		s.retryTimedOut(j, l)
	case l.Revoke != RevokeNone:
		s.finishRevoked(j, l, "released")
	default:
		s.setState(j, JobQueued)
	}
	j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
}

// finishRevoked ends a revoked job whose lease ended without a report.
func (s *state) finishRevoked(j *Job, l *Lease, how string) {
	j.setReason(fmt.Sprintf("%s; lease %s", l.Revoke, how))
	s.setState(j, JobCancelled)
	s.emit(Event{Type: EventJobCancelled, JobID: j.ID, Token: l.Token, Detail: j.Reason()})
}

func applyExpire(s *state, cmd Command) (any, error) {
	c := cmd.(*Expire)
	var res ExpireResult
	for _, ref := range c.Leases {
		j := s.jobByID(ref.JobID)
		if j == nil || liveLease(j, ref.Token) == nil {
			res.Ignored = append(res.Ignored, ref)
			continue
		}
		j = s.editJob(j.Seq)
		s.expireLease(j, c.Reason)
		res.Expired = append(res.Expired, ref)
	}
	return res, nil
}

// expireLease ends a live lease whose worker was lost and applies the job's
// policy. A lost worker never counts as an attempt, but a timeout does:
// a timed-out lease that expires counts an attempt (not a loss), then the
// job's retry policy decides, save for a run-style job, which ends lost
// (its command may still run, so it must not run twice).
func (s *state) expireLease(j *Job, reason string) {
	l := s.endLease(j, LeaseExpired)
	timedOut := l.Revoke == RevokeTimeout
	if timedOut {
		countTimeout(j, l)
	} else {
		j.Losses++
	}
	j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
	s.emit(Event{Type: EventLeaseExpired, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID, Detail: reason})
	switch {
	case timedOut && j.OnWorkerLost != LostFail:
		s.retryTimedOut(j, l)
	case l.Revoke != RevokeNone && !timedOut:
		s.finishRevoked(j, l, "expired")
	case j.OnWorkerLost == LostFail:
		j.setReason(ReasonWorkerLost)
		s.setState(j, JobLost)
		s.emit(Event{Type: EventJobLost, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID, Detail: j.Reason()})
	case j.Losses >= j.MaxWorkerLosses:
		if s.exhausted(j, fmt.Sprintf("%s (%d)", ReasonPoison, j.Losses)) {
			break // dead, from level 6
		}
		j.setReason(ReasonPoison)
		s.setState(j, JobFailed)
		s.emit(Event{Type: EventJobFailed, JobID: j.ID, Token: l.Token, Detail: fmt.Sprintf("%s (%d)", j.Reason(), j.Losses)})
	case !requeueExpired:
		// The broken chaos_norelease build: the job stays where it was,
		// under its ended lease, never queued again.
	default:
		s.setState(j, JobQueued)
		s.emit(Event{Type: EventJobRequeued, JobID: j.ID, Token: l.Token, Detail: ReasonWorkerLost})
	}
}

func applyCancel(s *state, cmd Command) (any, error) {
	c := cmd.(*Cancel)
	j := s.jobByID(c.JobID)
	if j == nil {
		return nil, fmt.Errorf("%w: job %s", ErrNotFound, c.JobID)
	}
	switch {
	case j.State == JobCancelled:
		return CancelResult{Job: j.export()}, nil
	case j.State.Terminal():
		return nil, fmt.Errorf("%w: job %s is %s", ErrFinished, j.ID, j.State)
	case j.State == JobQueued:
		j = s.editJob(j.Seq)
		s.cancelQueued(j, c.Reason)
		return CancelResult{Job: j.export()}, nil
	}
	want := RevokeCancel
	if c.Kill || j.lastLease().Revoke == RevokeTimeout {
		// A timed-out lease was told kill already; the cancel turns its
		// end from a timed-out attempt into the job's cancellation.
		want = RevokeKill
	}
	if r := j.lastLease().Revoke; r != RevokeTimeout && r >= want {
		return CancelResult{Job: j.export(), Revoked: true}, nil
	}
	j = s.editJob(j.Seq)
	l := j.lastLease()
	s.timeoutStops(j, l)
	l.Revoke = want
	j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
	s.emit(Event{Type: EventLeaseRevoked, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID, Detail: joinReason(want.String(), c.Reason)})
	return CancelResult{Job: j.export(), Revoked: true}, nil
}

func (s *state) cancelQueued(j *Job, reason string) {
	j.setReason(joinReason(ReasonCancelled, reason))
	s.setState(j, JobCancelled)
	j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
	s.emit(Event{Type: EventJobCancelled, JobID: j.ID, Detail: j.Reason()})
}

func joinReason(what, why string) string {
	if why == "" {
		return what
	}
	return what + ": " + why
}

func applyCancelSubmitter(s *state, cmd Command) (any, error) {
	c := cmd.(*CancelSubmitter)
	var res CancelSubmitterResult
	h := s.submitted[c.Submitter]
	if h == nil {
		return res, nil
	}
	// Oldest first: the cost is the jobs cancelled, not the jobs queued.
	for len(res.Cancelled) < int(c.Limit) {
		it, ok := h.peek(s.isQueued)
		if !ok {
			break
		}
		j := s.editJob(it.seq)
		s.cancelQueued(j, c.Reason)
		res.Cancelled = append(res.Cancelled, j.ID)
	}
	res.Remaining = h.live
	return res, nil
}
