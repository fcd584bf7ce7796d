//go:build chaos_earlyack

package cluster

// A deliberately broken build: a submit is answered as created as soon as
// its entry is handed to Raft, before any quorum has it (a leader cut off
// loses it).
const commitBeforeAck = false
