//go:build !chaos_openpeer

package cluster

// confirmJoinClaims: a join is accepted only when the node at the claimed
// Raft address confirms it is the claimed node, with the claimed addresses.
// The deliberately broken chaos_openpeer build turns it off, which
// jepsen-lite must catch (O1).
const confirmJoinClaims = true
