//go:build chaos_refire

package fsm

// A deliberately broken build: a slot already settled fires again.
const slotOnce = false
