//go:build !chaos_nofence

package api

// fenceCheck: CheckFence answers from the state. The deliberately broken
// chaos_nofence build answers "current" for any token, which jepsen-lite
// must catch (I5).
const fenceCheck = true
