//go:build chaos_openpeer

package cluster

// A deliberately broken build: a join is taken as it claims: nobody asks
// the node at the claimed address who it is, so an outsider's forged join
// is accepted.
const confirmJoinClaims = false
