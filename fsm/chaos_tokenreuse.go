//go:build chaos_tokenreuse

package fsm

// A deliberately broken build: a token floor sets the token counter even
// below it (the broken leader's takeover lowers it:
// cluster/chaos_tokenreuse.go).
const floorOnlyRises = false
