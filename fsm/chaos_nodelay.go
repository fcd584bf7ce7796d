//go:build chaos_nodelay

package fsm

// A deliberately broken build: a job's not_before is kept but ignored, so
// a job submitted to run later, or waiting out a retry's backoff, is ready
// at once.
const delayHonoured = false
