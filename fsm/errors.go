package fsm

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/transport/rules"
)

// Sentinel errors returned by Apply and the queries. Callers test them with
// errors.Is; transport maps each to a wire code and client maps it back.
var (
	// ErrInvalidArgument: a command or query failed validation. The error is
	// a *FieldError naming the field.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTooLarge: a field or a batch is longer than its bound.
	ErrTooLarge = errors.New("too large")
	// ErrNotFound: no such job, lease or worker.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request contradicts what is already recorded (same job
	// id with another spec, another report on a reported lease, ...).
	ErrConflict = errors.New("conflict")
	// ErrStaleToken: the token is not the current lease of its job. The
	// refusal is recorded as an event.
	ErrStaleToken = errors.New("stale token")
	// ErrNotOwner: a worker acted on a lease held by another worker.
	ErrNotOwner = errors.New("lease held by another worker")
	// ErrUnknownWorker: the worker is not registered.
	ErrUnknownWorker = errors.New("unknown worker")
	// ErrFinished: the job is already in a terminal state.
	ErrFinished = errors.New("job already finished")
	// ErrNotDead: the job is not dead, and only a dead job can be retried.
	ErrNotDead = errors.New("job not dead")
	// ErrTokensExhausted: the token counter cannot grow any further.
	ErrTokensExhausted = errors.New("fencing tokens exhausted")

	// ErrUnknownCommand: the command type is not known to this build. A
	// replica must not skip such an entry (it would diverge from replicas
	// that understand it); the cluster layer treats it as fatal.
	ErrUnknownCommand = errors.New("unknown command type")
	// ErrCorrupt: a command or snapshot could not be decoded.
	ErrCorrupt = errors.New("corrupt encoding")
	// ErrOutOfOrder: Apply was given an index that is not after the last
	// applied one. Raft never does that; it means the log and the state
	// disagree.
	ErrOutOfOrder = errors.New("log index out of order")
)

// IsFatal reports whether an Apply error means this replica can no longer
// follow the log: an entry it cannot decode or an index out of order. Every
// other error is a deterministic refusal that every replica makes alike.
func IsFatal(err error) bool {
	return errors.Is(err, ErrUnknownCommand) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrOutOfOrder)
}

// FieldError is a validation failure of one named field. It wraps
// ErrInvalidArgument or ErrTooLarge.
type FieldError struct {
	Field  string
	Reason string
	err    error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s: %s", e.err, e.Field, e.Reason) }

// Unwrap returns the sentinel: ErrInvalidArgument or ErrTooLarge.
func (e *FieldError) Unwrap() error { return e.err }

// InField names a refused field of a nested message: field F of err (an
// fsm or rules field error) becomes PREFIX.F. Any other error is returned
// as it is.
func InField(prefix string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		named := *fe
		named.Field = prefix + "." + fe.Field
		return &named
	}
	var re *rules.FieldError
	if errors.As(err, &re) {
		named := *re
		named.Field = prefix + "." + re.Field
		return &named
	}
	return err
}

func invalid(field, format string, args ...any) error {
	return fieldError(rules.Invalid(field, format, args...))
}

func tooLarge(field string, n, max int) error { return fieldError(rules.TooLong(field, n, max)) }
