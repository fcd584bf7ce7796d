//go:build chaos_noabsence

package cluster

// A deliberately broken build: the leader charges workers for its own
// absence. jepsen-lite must catch it (I11).
const (
	absenceRule     = false
	quorumBeforeAck = true
)
