package client

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/transport"
)

// Sentinel errors, one per reason code of the API (transport.Reason*). Every
// error a Client method returns for a server's answer is an *Error whose
// Unwrap gives one of these, so callers test errors.Is(err, ErrStaleToken)
// and take the details with errors.As.
var (
	// ErrNotLeader: the node is not the leader. The client follows the
	// leader hint by itself; a caller sees this only if the call ran out of
	// time while being redirected.
	ErrNotLeader = errors.New("not the leader")
	// ErrNoLeader: an election is on. Retried until the context ends.
	ErrNoLeader = errors.New("no leader")
	// ErrNotReady: a new leader is taking office. Retried.
	ErrNotReady = errors.New("leader not ready")
	// ErrShuttingDown: the node is stopping. Retried on another node.
	ErrShuttingDown = errors.New("node shutting down")
	// ErrOutcomeUnknown: leadership was lost while the write was proposed;
	// it may or may not have happened. Retried with the same ids.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrTimeout: the server's deadline passed; a write's outcome is
	// unknown. Retried with the same ids.
	ErrTimeout = errors.New("server timeout")
	// ErrInvalidArgument: the request failed validation; Error.Field names
	// the field.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTooLarge: a field or batch is over its bound; Error.Field names it.
	ErrTooLarge = errors.New("too large")
	// ErrNotFound: no such job, lease or worker.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the same job id with another spec, or another report on a
	// lease already reported.
	ErrConflict = errors.New("conflict")
	// ErrStaleToken: the token is not its job's live lease any more. The
	// server recorded the attempt as an event.
	ErrStaleToken = errors.New("stale token")
	// ErrNotOwner: the lease belongs to another worker.
	ErrNotOwner = errors.New("lease held by another worker")
	// ErrUnknownWorker: the worker is not registered.
	ErrUnknownWorker = errors.New("unknown worker")
	// ErrUnreachable: the worker was silent past grace; it must heartbeat
	// before it gets a new lease.
	ErrUnreachable = errors.New("worker unreachable")
	// ErrJobFinished: the job is already in a terminal state.
	ErrJobFinished = errors.New("job already finished")
	// ErrJobNotDead: only a dead job can be retried (RetryJob).
	ErrJobNotDead = errors.New("job not dead")
	// ErrTokensExhausted: the cluster's fencing token counter is at its end.
	ErrTokensExhausted = errors.New("fencing tokens exhausted")
	// ErrUnauthenticated: no valid bearer token.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: the token's role may not make this call.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrInternal: the server failed, or answered something the client
	// cannot use.
	ErrInternal = errors.New("internal error")
	// ErrRateLimited: the credential made more calls than the node allows
	// (per credential, per node). Retried after the server's hint
	// (Error.RetryAfter).
	ErrRateLimited = errors.New("rate limited")
	// ErrQuotaExceeded: the cluster's replicated state is at its quota, or
	// the submitter at its bound on queued jobs. Not retried: submits pass
	// again as jobs finish and are compacted.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrDiskFull: the node that answered cannot write its log
	// (Error.NodeID). Retried, on another node.
	ErrDiskFull = errors.New("disk full")
	// ErrUpgradeRequired: the request needs an entry some voter's build
	// cannot apply (a rolling upgrade in progress); the message names the
	// nodes to upgrade.
	ErrUpgradeRequired = errors.New("upgrade required")

	// ErrUnavailable: no server answered (dial failure, broken connection,
	// a proxy's 502/503/504). Retried until the context ends.
	ErrUnavailable = errors.New("unavailable")
)

// Errors of this package that are not server answers.
var (
	// ErrInvalidConfig: New or NewWorker was given options they cannot run
	// with. The message names the field and the value.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("client closed")
	// ErrTruncated: Watch found that events after the requested sequence
	// number were compacted away; the caller missed some and must resync.
	ErrTruncated = errors.New("events truncated")
)

// Worker runtime errors. They are the causes a handler's context is
// cancelled with (test them with context.Cause), and ErrRetryable marks a
// handler's error as worth another attempt.
var (
	// ErrRevoked: the job was cancelled or killed; the handler should stop
	// and return. Its result is still reported. The cause is a
	// *RevokedError, which matches ErrRevoked.
	ErrRevoked = errors.New("job revoked")
	// ErrLeaseLost: the lease is gone (the server said lost, or the worker
	// stopped its own jobs because heartbeats went unacknowledged). Nothing
	// is reported: another worker may already hold the job.
	ErrLeaseLost = errors.New("lease lost")
	// ErrShutdown: the worker is shutting down and the drain bound passed.
	// A handler that returns an error then has its lease released, so the
	// job runs again elsewhere without using an attempt.
	ErrShutdown = errors.New("worker shutting down")
	// ErrRetryable: a handler error that matches it is reported as a
	// retryable failure. Wrap an error with Retryable, or wrap ErrRetryable
	// itself with %w.
	ErrRetryable = errors.New("retryable")
	// ErrExecutionLost: a handler error that matches it says the execution
	// is gone without a result (the command vanished with the machine, say)
	// and must be settled as a lost worker's would be: the worker releases
	// the lease as lost (Client.ReleaseAsLost), so a run-style job ends
	// lost, never runs again, and no attempt is counted. On a cluster that
	// cannot apply that yet (ErrUpgradeRequired) the worker reports a
	// failure with the error's message instead.
	ErrExecutionLost = errors.New("worker lost")
	// ErrWorkerRunning: Run was called on a Worker that already ran.
	ErrWorkerRunning = errors.New("worker already running")
)

// sentinels maps each API reason to its sentinel. A test checks that every
// reason transport.Reasons lists is here.
var sentinels = map[string]error{
	transport.ReasonNotLeader:       ErrNotLeader,
	transport.ReasonNoLeader:        ErrNoLeader,
	transport.ReasonNotReady:        ErrNotReady,
	transport.ReasonShuttingDown:    ErrShuttingDown,
	transport.ReasonOutcomeUnknown:  ErrOutcomeUnknown,
	transport.ReasonTimeout:         ErrTimeout,
	transport.ReasonInvalidArgument: ErrInvalidArgument,
	transport.ReasonTooLarge:        ErrTooLarge,
	transport.ReasonNotFound:        ErrNotFound,
	transport.ReasonConflict:        ErrConflict,
	transport.ReasonStaleToken:      ErrStaleToken,
	transport.ReasonNotOwner:        ErrNotOwner,
	transport.ReasonUnknownWorker:   ErrUnknownWorker,
	transport.ReasonUnreachable:     ErrUnreachable,
	transport.ReasonJobFinished:     ErrJobFinished,
	transport.ReasonJobNotDead:      ErrJobNotDead,
	transport.ReasonTokensExhausted: ErrTokensExhausted,
	transport.ReasonUnauthenticated: ErrUnauthenticated,
	transport.ReasonForbidden:       ErrPermissionDenied,
	transport.ReasonRateLimited:     ErrRateLimited,
	transport.ReasonQuotaExceeded:   ErrQuotaExceeded,
	transport.ReasonDiskFull:        ErrDiskFull,
	transport.ReasonUpgradeRequired: ErrUpgradeRequired,
	transport.ReasonInternal:        ErrInternal,
}

// retryReasons are the answers that say "not now, not here": nothing was
// done, or a write's fate is unknown and its ids make a retry safe.
var retryReasons = map[string]bool{
	transport.ReasonNotLeader:      true,
	transport.ReasonNoLeader:       true,
	transport.ReasonNotReady:       true,
	transport.ReasonShuttingDown:   true,
	transport.ReasonOutcomeUnknown: true,
	transport.ReasonTimeout:        true,
	transport.ReasonRateLimited:    true,
	transport.ReasonDiskFull:       true,
}

// Error is a failed call: the server's answer (Reason from its ErrorDetail)
// or, with an empty Reason and Code Unavailable, a transport failure.
// errors.Is matches the sentinel of Reason.
type Error struct {
	Reason  string       // transport.Reason*; empty when the server gave none
	Code    connect.Code // the Connect/gRPC code
	Message string
	Field   string // INVALID_ARGUMENT, TOO_LARGE: the offending field
	// NOT_LEADER: where the leader is, as the answering node knows it.
	LeaderID  string
	LeaderAPI string
	// RATE_LIMITED: how long the server asked to wait before trying again.
	RetryAfter time.Duration
	// DISK_FULL: the node that answered.
	NodeID string

	cause error // the connect or network error, for errors.As past Error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("leasehold: ")
	if e.Reason != "" {
		b.WriteString(e.Reason)
	} else {
		b.WriteString(e.Code.String())
	}
	if e.Field != "" {
		b.WriteString(" (field ")
		b.WriteString(e.Field)
		b.WriteString(")")
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Unwrap returns the sentinel for Reason and the underlying error.
func (e *Error) Unwrap() []error {
	if e.cause == nil {
		return []error{e.sentinel()}
	}
	return []error{e.sentinel(), e.cause}
}

// sentinel is the sentinel of Reason, or, when the answer carried no
// reason (a proxy, a dead connection, a server that is not leasehold), the
// nearest one for its code.
func (e *Error) sentinel() error {
	if s, ok := sentinels[e.Reason]; ok {
		return s
	}
	switch e.Code {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled:
		return ErrUnavailable
	case connect.CodeUnauthenticated:
		return ErrUnauthenticated
	case connect.CodePermissionDenied:
		return ErrPermissionDenied
	case connect.CodeInvalidArgument:
		return ErrInvalidArgument
	case connect.CodeNotFound:
		return ErrNotFound
	}
	return ErrInternal
}

// toError turns what a generated client returned into an *Error.
func toError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return &Error{Code: connect.CodeUnavailable, Message: err.Error(), cause: err}
	}
	e = &Error{Code: cerr.Code(), Message: cerr.Message(), cause: err}
	if d := transport.DetailOf(err); d != nil {
		e.Reason = d.GetReason()
		e.Field = d.GetField()
		e.LeaderID = d.GetLeaderId()
		e.LeaderAPI = d.GetLeaderApi()
		e.RetryAfter = d.GetRetryAfter().AsDuration()
		e.NodeID = d.GetNodeId()
	}
	if e.Reason == transport.ReasonNotLeader && e.LeaderAPI == "" {
		// The header names the leader too, on every answer.
		e.LeaderAPI = cerr.Meta().Get(transport.HeaderLeader)
	}
	return e
}

// verdict is what the call loop does after a failed attempt.
type verdict int

const (
	giveUp   verdict = iota // return the error
	backOff                 // wait, rotate endpoints, try again
	redirect                // go to LeaderAPI at once
)

// classify decides whether a failed attempt is worth another. The caller
// checks its own context first: a deadline that passed only for the attempt
// (DeadlineExceeded here) is a slow node, retried elsewhere.
func classify(e *Error) verdict {
	if e.Reason != "" {
		if e.Reason == transport.ReasonNotLeader && e.LeaderAPI != "" {
			return redirect
		}
		if retryReasons[e.Reason] {
			return backOff
		}
		return giveUp
	}
	switch e.Code {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled:
		// Canceled by the other side (a node shutting down): the caller's
		// own context is checked before this, so it is alive.
		return backOff
	}
	if isNetworkError(e.cause) {
		return backOff
	}
	return giveUp
}

// isNetworkError spots connection failures that surface under another code
// (a connection reset while reading a body shows up as Unknown).
func isNetworkError(err error) bool {
	if err == nil {
		return false
	}
	var nerr net.Error
	return errors.As(err, &nerr) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		isHTTP2ConnError(err)
}

// http2ConnErrors are the messages of the HTTP/2 transport's errors for a
// connection that died or was closed under a request in flight (a node
// killed, or going away). They are unexported, so they are known by their
// text. The request may have arrived: writes are repeated with the same
// idempotency keys (submit, acquire, report), are harmless to repeat
// (start, heartbeat, cancel, register), or turn a refusal after such a
// repeat into ErrOutcomeUnknown (release).
var http2ConnErrors = []string{
	"http2: client connection lost",
	"http2: client connection force closed",
	"http2: client conn is closed",
	"http2: client conn not usable",
	"http2: Transport received Server's graceful shutdown GOAWAY",
}

func isHTTP2ConnError(err error) bool {
	msg := err.Error()
	for _, m := range http2ConnErrors {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// ctxError is what a call returns when its context ended while retrying:
// it matches ctx's error and, when there was one, the last answer.
func ctxError(ctx context.Context, last error) error {
	cerr := ctx.Err()
	if last == nil || errors.Is(last, cerr) {
		return cerr
	}
	return &retryError{ctx: cerr, last: last}
}

type retryError struct {
	ctx  error
	last error
}

func (e *retryError) Error() string   { return e.ctx.Error() + " (last error: " + e.last.Error() + ")" }
func (e *retryError) Unwrap() []error { return []error{e.ctx, e.last} }

// Retryable marks err as a retryable failure for the worker runtime: a
// handler returning it is reported OUTCOME_FAILED with retryable set, and
// the job is queued again until its max_attempts.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &retryableError{err: err}
}

type retryableError struct{ err error }

func (e *retryableError) Error() string   { return e.err.Error() }
func (e *retryableError) Unwrap() []error { return []error{e.err, ErrRetryable} }

// Snooze asks the worker runtime to report the job as a retryable failure
// to run again after d, whatever the job's retry policy says: return it
// from a handler. It still counts as an attempt, so a job cannot snooze
// past its max_attempts. d is at most 7 days.
func Snooze(d time.Duration) error {
	return &snoozeError{d: d}
}

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string   { return "snoozed for " + e.d.String() }
func (e *snoozeError) Unwrap() []error { return []error{ErrRetryable} }

// snoozeOf is the delay a handler's error asks for, or zero.
func snoozeOf(err error) time.Duration {
	var s *snoozeError
	if errors.As(err, &s) {
		return s.d
	}
	return 0
}

// RevokedError is the cause a handler's context is cancelled with when the
// server revokes its job. Kill tells a kill (stop now) from a cancel.
type RevokedError struct {
	Kill bool
}

func (e *RevokedError) Error() string {
	if e.Kill {
		return "job killed"
	}
	return "job cancelled"
}

// Is makes every *RevokedError match ErrRevoked.
func (e *RevokedError) Is(target error) bool { return target == ErrRevoked }

// mayHaveApplied reports whether a failed attempt of a write could have
// taken effect: it got no answer of the server's, or an answer that says
// the outcome is unknown.
func mayHaveApplied(err error) bool {
	switch toError(err).Reason {
	case "", transport.ReasonOutcomeUnknown, transport.ReasonTimeout, transport.ReasonShuttingDown:
		return true
	}
	return false
}
