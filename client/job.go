package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

// Job is a leased job as a handler sees it.
type Job struct {
	ID        string
	Queue     string
	Kind      string
	Submitter string
	Payload   []byte
	// Token is the lease's fencing token: hand it to any store the job
	// writes to, so a store can refuse a writer whose lease has ended.
	Token    uint64
	Attempts uint32 // attempts used before this one
	Lease    *leaseholdv1.Lease
	Spec     *leaseholdv1.JobSpec

	progress func(note string) // set by the worker that runs the job
}

// Progress publishes a short note on how the job goes ("step 3 of 5",
// "42%"), shown by `leasehold job get` while the lease lives. The latest
// note wins: it travels with the worker's next heartbeat (no call of its
// own; about a renew later), and only while the lease lives. Control
// characters become spaces, invalid UTF-8 U+FFFD, and a note longer than
// rules.MaxProgressLen (256) bytes is cut to it; an empty note clears it.
//
// The leader keeps notes in memory only: a new leader, or a stale read on
// a follower, shows none until the handler publishes again. A server from
// before notes never gets them. Progress is safe to call from any
// goroutine; on a Job the worker did not hand out it does nothing.
func (j *Job) Progress(note string) {
	if j.progress != nil {
		j.progress(progressNote(note))
	}
}

// progressNote makes note a valid one: one line of UTF-8 within
// rules.MaxProgressLen bytes.
func progressNote(note string) string {
	note = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, note) // invalid UTF-8 becomes U+FFFD
	return clip(note, rules.MaxProgressLen)
}

// Result is what a handler reports. A zero Outcome means SUCCEEDED.
// Retryable matters for OUTCOME_FAILED: the job is queued again until its
// max_attempts. Ref names the job's output (a commit, an object key).
type Result struct {
	Outcome   leaseholdv1.Outcome
	Retryable bool
	Ref       string
	Message   string
	// RetryAfter, with a retryable failure, asks for this delay before the
	// next attempt instead of the job's retry policy (see Snooze).
	RetryAfter time.Duration
}

// Handler runs one job. Its context is cancelled, with a cause to test by
// context.Cause, when the job must stop: a *RevokedError (matches
// ErrRevoked) when the job was cancelled or killed, ErrLeaseLost when the
// lease is gone, ErrShutdown when the worker stops and the drain bound has
// passed.
//
// A handler must return soon after its context ends: until it does, its
// lease stays named in heartbeats (kept alive, so no other worker gets the
// job while it runs) and Run cannot return.
//
// A returned error reports OUTCOME_FAILED, retryable if it matches
// ErrRetryable (see Retryable). After a revoke, returning ctx's error (or
// its cause) reports OUTCOME_CANCELLED or OUTCOME_KILLED. A panic is
// recovered and reported as a failure.
type Handler func(ctx context.Context, job *Job) (Result, error)

// jobOf turns a grant into the handler's Job, refusing grants the server
// should never send.
func jobOf(g *leaseholdv1.Grant) (*Job, error) {
	lease := g.GetLease()
	if lease.GetToken() == 0 || lease.GetJobId() == "" {
		return nil, fmt.Errorf("%w: grant without a lease token or job id", ErrInternal)
	}
	j := g.GetJob()
	spec := j.GetSpec()
	if id := spec.GetId(); id != "" && id != lease.GetJobId() {
		return nil, fmt.Errorf("%w: grant of lease %d names job %q but carries job %q", ErrInternal, lease.GetToken(), lease.GetJobId(), id)
	}
	return &Job{
		ID:        lease.GetJobId(),
		Queue:     spec.GetQueue(),
		Kind:      spec.GetKind(),
		Submitter: spec.GetSubmitter(),
		Payload:   spec.GetPayload(),
		Token:     lease.GetToken(),
		Attempts:  j.GetAttempts(),
		Lease:     lease,
		Spec:      spec,
	}, nil
}

// outcomeOf decides what to report for a handler that returned res and
// err, its context having ended with cause (nil if it did not end), and
// the delay a retryable failure asks for.
func outcomeOf(res Result, err error, cause error) (outcome leaseholdv1.Outcome, retryable bool, message string, retryAfter time.Duration) {
	outcome, retryable, message = outcomeWords(res, err, cause)
	if retryable {
		retryAfter = res.RetryAfter
		if d := snoozeOf(err); d > 0 {
			retryAfter = d
		}
	}
	return outcome, retryable, message, retryAfter
}

func outcomeWords(res Result, err error, cause error) (outcome leaseholdv1.Outcome, retryable bool, message string) {
	var rev *RevokedError
	switch {
	case err != nil && errors.As(cause, &rev) && (errors.Is(err, context.Canceled) || errors.Is(err, ErrRevoked)):
		outcome = leaseholdv1.Outcome_OUTCOME_CANCELLED
		if rev.Kill {
			outcome = leaseholdv1.Outcome_OUTCOME_KILLED
		}
		return outcome, false, firstNonEmpty(res.Message, rev.Error())
	case err != nil:
		return leaseholdv1.Outcome_OUTCOME_FAILED, errors.Is(err, ErrRetryable), firstNonEmpty(res.Message, err.Error())
	case res.Outcome == leaseholdv1.Outcome_OUTCOME_UNSPECIFIED:
		return leaseholdv1.Outcome_OUTCOME_SUCCEEDED, false, res.Message
	default:
		return res.Outcome, res.Retryable, res.Message
	}
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// clip makes s valid UTF-8 (proto strings must be) and cuts it to at most n
// bytes without splitting a character.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
