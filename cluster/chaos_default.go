//go:build !chaos_noabsence && !chaos_noverify

package cluster

// The guarantees jepsen-lite proves can each be switched off by a build
// tag, to show that jepsen-lite catches the loss (make chaos). A normal
// build has them all. These two share a file; the later ones each have a
// pair of their own (chaos_GUARANTEE.go, chaos_TAG.go).
const (
	// absenceRule: a timer loop that was away longer than grace shifts
	// every deadline by the gap (chaos_noabsence turns it off).
	absenceRule = true
	// quorumBeforeAck: heartbeats are acknowledged only by the established
	// leader, after a quorum check (chaos_noverify turns it off).
	quorumBeforeAck = true
)
