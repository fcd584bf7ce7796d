//go:build chaos_noreportid

package fsm

// A deliberately broken build: a repeated report id is applied again, as a
// new report, instead of getting the first answer.
const reportIDIdempotent = false
