//go:build !chaos_stalereads

package cluster

// linearizableReads: a linearizable read waits for a read barrier (this
// node leads, confirmed by a quorum, and has applied everything committed
// before the read). The deliberately broken chaos_stalereads build turns it
// off, which jepsen-lite must catch (I10).
const linearizableReads = true
