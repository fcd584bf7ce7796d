// Package fsm is leasehold's lease state machine: the deterministic state
// that Raft replicates. It holds jobs, their leases and fencing tokens,
// workers, report records and the event log, and nothing else.
//
// Everything here is a pure function of the log: commands carry the time the
// leader stamped on them, the package never reads a clock, starts no
// goroutine and does no I/O but the snapshot stream. Renewal of leases by
// heartbeats is deliberately absent: it lives in the leader's memory (package
// cluster), and a lease ends here only by a command (report, release, or an
// Expire the leader proposes with the exact tokens it ends).
//
// The entry points are New, FSM.Apply (decode and apply one log entry),
// FSM.Snapshot / Snapshot.WriteTo / FSM.Restore, the queries (Job, Lease,
// Jobs, Events, Fence, ...), Encode for the leader's side, and
// CheckInvariants, which every test calls after every step. DESIGN.md explains
// the states, the token rule, idempotency and what is left out on purpose.
package fsm
