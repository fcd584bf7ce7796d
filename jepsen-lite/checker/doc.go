// Package checker judges a jepsen-lite history (package history) against
// the invariants of SPEC section 9, I1 to I12; I13: no grant before the
// job's not_before (issue 15: run-at and retry backoff); I14: each schedule
// slot fired at most once (issue 15: schedules); O1: nothing outside the
// cluster changed it; and F1: a flood of bad calls was refused and pushed
// nothing out of the event log (SPEC section 8). Check runs every checker
// and returns a Report: per invariant a Result with its violations (each
// citing the entries that show it), figures (Stats) and notes on what it
// could not judge; totals of operations and faults; the smallest expiry
// slack and the recovery times after the heal. Report.WriteJSON is for
// machines, Report.Summary for a terminal.
//
// # What the checkers stand on
//
// A history is seen from outside the cluster, so each checker reasons only
// from what the entries prove, and flags only real contradictions:
//
//   - A call took effect at one moment between its invoke and its
//     complete; an info call at any moment after its invoke, or never.
//     Two calls are ordered only when one completed before the other was
//     invoked.
//   - A lease never comes back to life. The earliest observation that a
//     token had ended (a later token granted, a report or release
//     acknowledged, a linearizable read naming another token, an expiry
//     event) dates the end from above (endings.go); anything done with the
//     token after that was done with a stale token.
//   - An observation of an event comes after the event: an expiry seen at
//     t committed before t, so a worker still running at t ran past it.
//   - The final states, read from each node after the heal, are the
//     authority on which tokens each job had.
//
// Where a checker needs something the history lacks (final states, a
// complete event log, the timings) it says so in its notes rather than
// guess. Executions are the exec_start/exec_stop spans of whoever ran the
// job: a Go worker's handler, or a shell worker's command (a process of its
// own, WORKER/TOKEN/PID, whose stop a watcher records if it was
// SIGKILLed), judged alike by I3 and I4. A worker whose calls are not
// recorded (history.Run's unrecorded: a shell worker) leaves its jobs'
// lease operations partly unseen; I10 leaves those jobs out. The files,
// one per invariant, open with what they decide and what
// they leave alone. I10's model of a job is in model.go; histories of
// correct clusters with random interleavings (sim_test.go) keep the
// checkers honest about false positives.
package checker
