//go:build chaos_doublegrant

package fsm

// A deliberately broken build: each acquire also grants another worker's
// leased job (its oldest live lease that is not already doubled) while that
// lease stays live.
const singleGrant = false
