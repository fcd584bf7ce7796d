//go:build !chaos_noreportid

package fsm

// reportIDIdempotent: a report repeating the report id its lease was
// reported with gets the first answer again. The deliberately broken
// chaos_noreportid build judges the repeat as a new report (refused as
// stale: its lease has ended), which jepsen-lite must catch (I6).
const reportIDIdempotent = true
