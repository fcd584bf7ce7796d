//go:build chaos_noverify

package cluster

// A deliberately broken build: heartbeats are acknowledged from the last
// expiry table this node had, without checking it still leads. A deposed
// leader keeps a worker running after the cluster re-granted its job.
// jepsen-lite must catch it (I3, I4).
const (
	absenceRule     = true
	quorumBeforeAck = false
)
