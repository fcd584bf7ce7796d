//go:build chaos_stalereads

package cluster

// A deliberately broken build: a linearizable read is served from this
// node's local state, whether it leads or not, without a barrier.
const linearizableReads = false
