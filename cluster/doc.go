// Package cluster is one leasehold node: hashicorp/raft over raft-boltdb
// replicating the lease state machine (package fsm), and, while the node is
// the leader, the in-memory expiry table that turns silence into expired
// leases.
//
// The pieces:
//   - node.go: New wires Raft, the stores and the transport mux; Shutdown
//     hands leadership over first, Kill does not.
//   - leader.go: leadership from Raft's NotifyCh, a barrier, then
//     establishLeadership (the expiry table with every clock restarted) and
//     the leader loop (expiry ticks, compaction); revokeLeadership drops it.
//   - expiry.go: the table of when each worker was last heard, the absence
//     rule, unreachable/reachable, the decision to expire.
//   - worker.go: Heartbeat (renewal in memory, acknowledged after a batched
//     quorum check, verify.go) and the long-poll Acquire.
//   - apply.go: proposals with deadlines and typed errors; ReadBarrier for
//     linearizable reads.
//   - membership.go: bootstrap-expect and join, the replicated node table
//     with API addresses, add/remove/transfer/members/status.
//   - snapshot.go: an operator's backup and restore, with the token floor.
//
// Only this package translates between the state machine's commands and
// the wire's messages. DESIGN.md explains the time model, the invariants
// the leader keeps, and what happens at failover.
package cluster
