package fsm

import (
	"errors"
	"time"

	"github.com/leasehold/leasehold/transport/rules"
)

// Bounds on everything a command carries. Validation enforces them before
// a command reaches the log, and the decoder enforces them again so a corrupt
// or hostile entry cannot allocate without limit. The bounds of what clients
// send are transport/rules' (the client checks them too); the rest are the
// state machine's own.
const (
	MaxIDLen        = rules.MaxIDLen        // job, worker, request, report and submitter ids
	MaxNameLen      = rules.MaxNameLen      // queue and kind names
	MaxPayloadLen   = rules.MaxPayloadLen   // job payload bytes
	MaxRefLen       = rules.MaxRefLen       // a report's output ref
	MaxMessageLen   = rules.MaxMessageLen   // messages and reasons
	MaxVersionLen   = rules.MaxVersionLen   // the version a worker registers with
	MaxAddrLen      = rules.MaxAddrLen      // a node's host:port
	MaxSelectors    = rules.MaxSelectors    // queues or kinds in one acquire
	MaxAcquireBatch = rules.MaxAcquireBatch // leases granted by one acquire
	MaxCapacity     = rules.MaxCapacity     // leases one worker may hold: deregistering releases them in one entry
	MaxAttempts     = rules.MaxAttempts     // bound on MaxAttempts and MaxWorkerLosses
	MaxCancelBatch  = rules.MaxCancelBatch  // jobs cancelled by one CancelSubmitter
	// MaxRetryDelay bounds a retry policy's delays and a report's
	// retry-after, in nanoseconds.
	MaxRetryDelay      = int64(rules.MaxRetryDelay)
	MaxRetryMultiplier = rules.MaxRetryMultiplier // per mille
	// MinTimeout and MaxTimeout bound a job's timeout, in milliseconds.
	MinTimeout      = uint32(rules.MinTimeout / time.Millisecond)
	MaxTimeout      = uint32(rules.MaxTimeout / time.Millisecond)
	MaxTimeOutBatch = 4096  // leases timed out by one TimeOut
	MaxExpireBatch  = 4096  // leases ended by one expire
	MaxCompactBatch = 10000 // jobs removed by one Compact

	// MaxLeaseHistory is how many leases a job keeps. Older ones are dropped;
	// a report with a dropped token is still refused as stale because tokens
	// of a job only grow.
	MaxLeaseHistory = 32
	// MaxEvents bounds the event log whatever the compaction schedule.
	MaxEvents = 100000
	// MaxNodes bounds the node table: clusters have three or five voters,
	// a few more while one is being replaced.
	MaxNodes = 64
	// MaxWorkers bounds the worker table.
	MaxWorkers = 100000
	// MaxJobs bounds the jobs kept (queued, leased and finished but not yet
	// compacted); a submit beyond it is refused with ErrTooLarge.
	MaxJobs = 10_000_000
	// MaxTokenFloor keeps room above any floor for 2^63 more grants.
	MaxTokenFloor = 1 << 63
	// MaxIndex bounds raft indexes and the state's sequence counters (jobs,
	// finishes, events) in a snapshot. No cluster reaches it (a million
	// entries a second for 146,000 years); a snapshot that claims it is
	// crafted. It is the bound transport.MaxRaftValue puts on indexes on
	// the wire.
	MaxIndex = 1 << 62
)

// The field checks are transport/rules'; these give their failures the
// state machine's sentinels (ErrInvalidArgument, ErrTooLarge).

func checkID(field, s string) error         { return fieldError(rules.CheckID(field, s)) }
func checkOptionalID(field, s string) error { return fieldError(rules.CheckOptionalID(field, s)) }
func checkName(field, s string) error       { return fieldError(rules.CheckName(field, s)) }
func checkVersion(field, s string) error    { return fieldError(rules.CheckVersion(field, s)) }
func checkNames(field string, names []string) error {
	return fieldError(rules.CheckNames(field, names))
}
func checkText(field, s string, max int) error  { return fieldError(rules.CheckText(field, s, max)) }
func checkPayload(field string, b []byte) error { return fieldError(rules.CheckPayload(field, b)) }
func checkAddr(field, s string) error           { return fieldError(rules.CheckAddr(field, s)) }
func checkToken(field string, t uint64) error   { return fieldError(rules.CheckToken(field, t)) }
func checkRange(field string, n, lo, hi uint64) error {
	return fieldError(rules.CheckRange(field, n, lo, hi))
}

// fieldError turns a *rules.FieldError into a *FieldError; nil stays nil.
func fieldError(err error) error {
	if err == nil {
		return nil // before errors.As, whose target escapes: valid input allocates nothing
	}
	var fe *rules.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	sentinel := ErrInvalidArgument
	if fe.TooLarge {
		sentinel = ErrTooLarge
	}
	return &FieldError{Field: fe.Field, Reason: fe.Reason, err: sentinel}
}

// ValidateHeld validates what a worker's heartbeat names: its id and at
// most MaxCapacity leases. Heartbeats are not commands, but they are input
// like any other.
func ValidateHeld(workerID string, held []LeaseRef) error {
	if err := checkID("worker_id", workerID); err != nil {
		return err
	}
	if len(held) > MaxCapacity {
		return tooLarge("leases", len(held), MaxCapacity)
	}
	for _, h := range held {
		if err := checkID("leases.job_id", h.JobID); err != nil {
			return err
		}
		if err := checkToken("leases.token", h.Token); err != nil {
			return err
		}
	}
	return nil
}
