//go:build !chaos_refire

package cluster

// readSettled: the leader finds a schedule's due slots after its LastSlot,
// what earlier leaders settled. The deliberately broken chaos_refire build
// looks from the schedule's creation instead (and its state machine fires
// a settled slot again), which jepsen-lite must catch (I14).
const readSettled = true
