//go:build !chaos_tokenreuse

package cluster

// keepTokenCounter: a new leader takes the token counter as the state
// machine has it. The deliberately broken chaos_tokenreuse build turns it
// off, which jepsen-lite must catch (I1).
const keepTokenCounter = true
