//go:build !chaos_earlyack

package cluster

// commitBeforeAck: a submit is answered once its entry is committed by a
// quorum and applied. The deliberately broken chaos_earlyack build turns it
// off, which jepsen-lite must catch (I7).
const commitBeforeAck = true
