//go:build !chaos_norelease

package fsm

// requeueExpired: a job whose lease expired is queued again (unless its
// policy ends it). The deliberately broken chaos_norelease build leaves it
// where it was, never queued again, which jepsen-lite must catch (I9, I12).
const requeueExpired = true
