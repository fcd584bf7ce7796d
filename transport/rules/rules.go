package rules

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds on what a client may send. The state machine enforces them before
// a command reaches the log and again when it decodes one; the API before
// it proposes or forwards anything; the client on its own configuration.
const (
	MaxIDLen        = 128       // job, worker, request, report, submitter and node ids
	MaxNameLen      = 64        // queue, kind and action names
	MaxPayloadLen   = 256 << 10 // job payload bytes
	MaxRefLen       = 1024      // a report's output ref
	MaxMessageLen   = 4096      // messages and reasons
	MaxVersionLen   = 64        // the version a worker registers with
	MaxProgressLen  = 256       // a progress note a heartbeat carries
	MaxAddrLen      = 256       // a host:port
	MaxSelectors    = 32        // queues or kinds in one acquire
	MaxAcquireBatch = 256       // leases granted by one acquire
	MaxCapacity     = 4096      // leases one worker may hold
	MaxAttempts     = 1000      // bound on a job's max attempts and max worker losses
	MaxCancelBatch  = 10000     // jobs cancelled by one cancel-submitter call

	// MaxRetryDelay bounds a retry policy's delays and a report's own
	// retry-after.
	MaxRetryDelay = 7 * 24 * time.Hour
	// MaxRetryMultiplier bounds a retry policy's multiplier, per mille.
	MaxRetryMultiplier = 10000

	// MaxWait bounds a long poll (an acquire's or an event list's wait).
	MaxWait = 60 * time.Second
)

// CheckID checks an identifier: 1..MaxIDLen printable ASCII bytes, no
// spaces.
func CheckID(field, s string) error {
	if s == "" {
		return Invalid(field, "must not be empty")
	}
	if len(s) > MaxIDLen {
		return TooLong(field, len(s), MaxIDLen)
	}
	return checkPrintable(field, s)
}

// CheckOptionalID is CheckID for a field that may be empty.
func CheckOptionalID(field, s string) error {
	if s == "" {
		return nil
	}
	return CheckID(field, s)
}

// CheckVersion checks the version a worker registers with: empty (it did
// not say), or up to MaxVersionLen printable ASCII bytes, no spaces (it is
// shown in a table column).
func CheckVersion(field, s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxVersionLen {
		return TooLong(field, len(s), MaxVersionLen)
	}
	return checkPrintable(field, s)
}

// CheckName checks a queue or kind name: 1..MaxNameLen bytes of
// [A-Za-z0-9._-].
func CheckName(field, s string) error {
	if s == "" {
		return Invalid(field, "must not be empty")
	}
	if len(s) > MaxNameLen {
		return TooLong(field, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return Invalid(field, "byte %d: only letters, digits, '.', '_' and '-' are allowed", i)
		}
	}
	return nil
}

// CheckNames checks a list of at most MaxSelectors distinct names; an
// empty list passes.
func CheckNames(field string, names []string) error {
	if len(names) > MaxSelectors {
		return TooLong(field, len(names), MaxSelectors)
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if err := CheckName(field, n); err != nil {
			return err
		}
		if seen[n] {
			return Invalid(field, "%q is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

// CheckText checks free text: at most max bytes of valid UTF-8, with no
// control characters but tab and newline.
func CheckText(field, s string, max int) error {
	if len(s) > max {
		return TooLong(field, len(s), max)
	}
	if !utf8.ValidString(s) {
		return Invalid(field, "not valid UTF-8")
	}
	for _, r := range s {
		if r < ' ' && r != '\t' && r != '\n' || r == 0x7f {
			return Invalid(field, "control character %U", r)
		}
	}
	return nil
}

// CheckPayload checks a job's payload: at most MaxPayloadLen bytes, any
// bytes.
func CheckPayload(field string, b []byte) error {
	if len(b) > MaxPayloadLen {
		return TooLong(field, len(b), MaxPayloadLen)
	}
	return nil
}

// CheckAddr checks a host:port: at most MaxAddrLen printable ASCII bytes,
// a numeric port after the last colon.
func CheckAddr(field, s string) error {
	if len(s) > MaxAddrLen {
		return TooLong(field, len(s), MaxAddrLen)
	}
	if err := checkPrintable(field, s); err != nil {
		return err
	}
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return Invalid(field, "%q is not host:port", s)
	}
	for _, c := range s[i+1:] {
		if c < '0' || c > '9' {
			return Invalid(field, "%q has no numeric port", s)
		}
	}
	return nil
}

// CheckToken checks a fencing token: tokens start at 1.
func CheckToken(field string, t uint64) error {
	if t == 0 {
		return Invalid(field, "must not be zero")
	}
	return nil
}

// CheckRange checks that n is in lo..hi.
func CheckRange(field string, n, lo, hi uint64) error {
	if n < lo || n > hi {
		return Invalid(field, "%d is outside %d..%d", n, lo, hi)
	}
	return nil
}

func checkPrintable(field, s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return Invalid(field, "byte %d is not printable ASCII", i)
		}
	}
	return nil
}
