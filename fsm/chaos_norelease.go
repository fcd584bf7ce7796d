//go:build chaos_norelease

package fsm

// A deliberately broken build: an expired lease's job is never queued
// again; it stays acquired or running under an ended lease.
const requeueExpired = false
