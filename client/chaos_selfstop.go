//go:build !chaos_noselfstop

package client

// selfStop: a worker stops every job when its self-stop deadline passes
// without an acknowledged heartbeat. The deliberately broken
// chaos_noselfstop build turns it off, which jepsen-lite must catch (I3,
// I4).
const selfStop = true
