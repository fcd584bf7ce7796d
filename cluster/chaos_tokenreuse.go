//go:build chaos_tokenreuse

package cluster

// A deliberately broken build: a new leader sets the token counter to its
// last applied grant minus one at takeover, so its first grant reuses a
// token (the state machine's floor may then go down:
// fsm/chaos_tokenreuse.go).
const keepTokenCounter = false
