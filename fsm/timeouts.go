package fsm

import (
	"fmt"
	"time"
)

// Execution timeouts. A job submitted with a timeout (Job.TimeoutMs) gives
// each of its leases a deadline: GrantedAt + the timeout, the attempt
// starting at the grant. The state machine never acts on a deadline by
// itself (it has no clock): the leader asks TimedOut which leases are past
// theirs by its time and proposes TimeOut; its apply checks each lease
// against the command's own time, revokes it with RevokeTimeout (the
// worker is told kill) and records lease.timed_out. When that lease ends,
// reported with any outcome, released or expired, its outcome is
// OutcomeTimedOut, the execution counts as an attempt, and the job's retry
// policy decides: queued again after the policy's backoff while Attempts
// is below MaxAttempts, else out of attempts.
//
// The leader finds the leases through the timeout heap, ordered by
// deadline, so a tick costs the leases due, not every lease. It is derived
// (rebuilt on restore). An entry is live while its lease is its job's
// current live lease and not yet revoked: a lease that ends, or is
// cancelled or timed out, leaves a stale entry, dropped when it reaches
// the top or all at once when stale entries outnumber live ones.

type timeoutItem struct {
	at    int64 // the lease's deadline: GrantedAt + its job's timeout
	token uint64
}

func (a timeoutItem) time() int64 { return a.at }

func (a timeoutItem) before(b timeoutItem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.token < b.token
}

// timeoutHeap holds the live leases that can time out; live counts them.
type timeoutHeap = timeHeap[timeoutItem]

// timing returns the lease an entry names while the entry is live.
func (s *state) timing(it timeoutItem) (*Job, *Lease, bool) {
	seq, ok := s.tokens.find(it.token)
	if !ok {
		return nil, nil, false
	}
	j := s.job(seq)
	l := liveLease(j, it.token)
	return j, l, l != nil && l.Revoke == RevokeNone && j.TimeoutMs > 0
}

// timeoutStarts enters a new live lease of a job with a timeout.
func (s *state) timeoutStarts(j *Job, l *Lease) {
	if j.TimeoutMs > 0 {
		s.timeouts.push(timeoutItem{at: l.GrantedAt + j.Timeout(), token: l.Token})
	}
}

// timeoutStops records that a live lease is about to end or be revoked:
// its entry, if live, turns stale. Call it before the change.
func (s *state) timeoutStops(j *Job, l *Lease) {
	if j.TimeoutMs == 0 || l.State != LeaseActive || l.Revoke != RevokeNone {
		return
	}
	s.timeouts.left(func(it timeoutItem) bool {
		_, _, ok := s.timing(it)
		return ok && it.token != l.Token // the lease leaving still looks live
	})
}

// dropStaleTimeouts pops the stale entries at the top of the heap. It runs
// after each command, so the leader's walks start at a live entry.
func (s *state) dropStaleTimeouts() {
	h := &s.timeouts
	for len(h.items) > 0 {
		if _, _, ok := s.timing(h.items[0]); ok {
			return
		}
		h.pop()
	}
}

// timedOut lists up to limit live leases whose deadline is at or before
// now. The walk visits only entries due by now.
func (s *state) timedOut(now int64, limit int) []LeaseRef {
	var out []LeaseRef
	walkDue(s.timeouts.items, now, func(it timeoutItem) bool {
		if j, l, ok := s.timing(it); ok {
			out = append(out, LeaseRef{JobID: j.ID, Token: l.Token})
		}
		return len(out) < limit
	})
	return out
}

// nextTimeoutAfter returns the earliest deadline after now (perhaps of a
// stale entry: it only wakes the leader early).
func (s *state) nextTimeoutAfter(now int64) (int64, bool) {
	return earliestAfter(s.timeouts.items, now)
}

func applyTimeOut(s *state, cmd Command) (any, error) {
	c := cmd.(*TimeOut)
	var res TimeOutResult
	for _, ref := range c.Leases {
		j := s.jobByID(ref.JobID)
		// The leader's list is only a proposal: the lease must still be
		// current, live, unrevoked and past its deadline by this command's
		// time.
		if j == nil || j.TimeoutMs == 0 {
			res.Ignored = append(res.Ignored, ref)
			continue
		}
		if l := liveLease(j, ref.Token); l == nil || l.Revoke != RevokeNone || s.lastTime < l.GrantedAt+j.Timeout() {
			res.Ignored = append(res.Ignored, ref)
			continue
		}
		j = s.editJob(j.Seq)
		l := j.lastLease()
		s.timeoutStops(j, l)
		l.Revoke = RevokeTimeout
		j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
		s.emit(Event{Type: EventLeaseTimedOut, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID,
			Detail: fmt.Sprintf("past its timeout of %s; revoked with a kill", time.Duration(j.Timeout()))})
		res.TimedOut = append(res.TimedOut, ref)
	}
	return res, nil
}

// countTimeout records that a timed-out lease ended, however it ended: its
// outcome is timed_out and its execution an attempt.
func countTimeout(j *Job, l *Lease) {
	l.Outcome = OutcomeTimedOut
	j.Attempts++
}

// retryTimedOut lets the job's retry policy decide after a timed-out
// attempt (countTimeout): queued again after the policy's backoff while
// attempts remain, else out of attempts.
func (s *state) retryTimedOut(j *Job, l *Lease) {
	if j.Attempts >= j.MaxAttempts {
		s.timedOutOfAttempts(j, fmt.Sprintf("timed out; out of attempts (%d of %d)", j.Attempts, j.MaxAttempts))
		return
	}
	var delay int64
	if j.Retry != nil {
		delay = j.Retry.retryDelay(j.ID, j.Attempts)
	}
	s.requeueAfter(j, delay)
	if delay > 0 {
		s.emit(Event{Type: EventRetryScheduled, JobID: j.ID, Token: l.Token,
			Detail: fmt.Sprintf("timed out; retry in %s, not before %s", time.Duration(delay), formatTime(j.NotBefore))})
	} else {
		s.emit(Event{Type: EventJobRequeued, JobID: j.ID, Token: l.Token, Detail: "timed out"})
	}
}

// timedOutOfAttempts ends a job whose timed-out attempt used up
// MaxAttempts: dead from level 6 (exhausted), else reported, as a final
// failure ends in applyReport (the job's outcome is its last lease's).
func (s *state) timedOutOfAttempts(j *Job, reason string) {
	if s.exhausted(j, reason) {
		return
	}
	j.setReason(reason)
	s.setState(j, JobReported)
}

// reportTimedOut ends a timed-out lease its worker reported (with any
// outcome: the report's strings are kept, the outcome is timed_out).
func (s *state) reportTimedOut(j *Job, l *Lease, reported Outcome) ReportResult {
	countTimeout(j, l)
	l.Retryable = false
	s.emit(Event{Type: EventLeaseReported, JobID: j.ID, Token: l.Token, WorkerID: l.WorkerID, Ref: l.Ref(),
		Detail: fmt.Sprintf("%s (reported %s)", OutcomeTimedOut, reported)})
	s.retryTimedOut(j, l)
	l.Answer = j.State
	j.UpdatedAt, j.ModifyIndex = s.lastTime, s.lastIndex
	return reportResult(j, l)
}
