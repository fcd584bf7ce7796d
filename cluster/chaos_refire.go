//go:build chaos_refire

package cluster

// A deliberately broken build: the leader ignores what was settled.
const readSettled = false
