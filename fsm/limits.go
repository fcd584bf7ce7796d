package fsm

import (
	"strings"
	"unicode/utf8"
)

// Bounds on everything a command carries. Validation enforces them before a
// command reaches the log, and the decoder enforces them again so a corrupt
// or hostile entry cannot allocate without limit.
const (
	MaxIDLen        = 128       // job, worker, request, report and submitter ids
	MaxNameLen      = 64        // queue and kind names
	MaxPayloadLen   = 256 << 10 // job payload bytes
	MaxRefLen       = 1024      // a report's output ref
	MaxMessageLen   = 4096      // messages and reasons
	MaxAddrLen      = 256       // a node's host:port
	MaxSelectors    = 32        // queues or kinds in one acquire
	MaxAcquireBatch = 256       // leases granted by one acquire
	MaxExpireBatch  = 4096      // leases ended by one expire
	MaxCapacity     = 4096      // leases one worker may hold: deregistering releases them in one entry
	MaxAttempts     = 1000      // bound on MaxAttempts and MaxWorkerLosses
	MaxCancelBatch  = 10000     // jobs cancelled by one CancelSubmitter
	MaxCompactBatch = 10000     // jobs removed by one Compact

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

// checkID validates an identifier: 1..MaxIDLen printable ASCII, no spaces.
func checkID(field, s string) error {
	if s == "" {
		return invalid(field, "must not be empty")
	}
	if len(s) > MaxIDLen {
		return tooLarge(field, len(s), MaxIDLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return invalid(field, "byte %d is not printable ASCII", i)
		}
	}
	return nil
}

// checkOptionalID is checkID for fields that may be empty.
func checkOptionalID(field, s string) error {
	if s == "" {
		return nil
	}
	return checkID(field, s)
}

// checkName validates a queue or kind name: 1..MaxNameLen of [A-Za-z0-9._-].
func checkName(field, s string) error {
	if s == "" {
		return invalid(field, "must not be empty")
	}
	if len(s) > MaxNameLen {
		return tooLarge(field, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return invalid(field, "byte %d: only letters, digits, '.', '_' and '-' are allowed", i)
		}
	}
	return nil
}

// checkNames validates a list of distinct names.
func checkNames(field string, names []string) error {
	if len(names) > MaxSelectors {
		return tooLarge(field, len(names), MaxSelectors)
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if err := checkName(field, n); err != nil {
			return err
		}
		if seen[n] {
			return invalid(field, "%q is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

// checkText validates free text: valid UTF-8, no control characters other
// than tab and newline, at most max bytes.
func checkText(field, s string, max int) error {
	if len(s) > max {
		return tooLarge(field, len(s), max)
	}
	if !utf8.ValidString(s) {
		return invalid(field, "not valid UTF-8")
	}
	for _, r := range s {
		if r < ' ' && r != '\t' && r != '\n' || r == 0x7f {
			return invalid(field, "control character %U", r)
		}
	}
	return nil
}

// checkAddr validates a host:port: printable ASCII, a numeric port after
// the last colon, at most MaxAddrLen bytes.
func checkAddr(field, s string) error {
	if len(s) > MaxAddrLen {
		return tooLarge(field, len(s), MaxAddrLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return invalid(field, "byte %d is not printable ASCII", i)
		}
	}
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return invalid(field, "%q is not host:port", s)
	}
	for _, c := range s[i+1:] {
		if c < '0' || c > '9' {
			return invalid(field, "%q has no numeric port", s)
		}
	}
	return nil
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

func checkToken(field string, t uint64) error {
	if t == 0 {
		return invalid(field, "must not be zero")
	}
	return nil
}
