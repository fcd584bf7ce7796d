//go:build !chaos_doublegrant

package fsm

// singleGrant: an acquire grants only queued jobs. The deliberately broken
// chaos_doublegrant build also grants a job that already has a live lease,
// which jepsen-lite must catch (I2, I3).
const singleGrant = true
