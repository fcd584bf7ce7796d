// Package cluster is one leasehold node: hashicorp/raft over raft-boltdb
// replicating the lease state machine (package fsm), and, while the node is
// the leader, the in-memory expiry table that turns silence into expired
// leases.
//
// The pieces:
//   - node.go: New wires Raft, the stores and the transport mux; Shutdown
//     hands leadership over first, Kill does not; a node that cannot go on
//     safely stops itself (halt). config.go: Config, its defaults and
//     Validate; errors.go: the sentinels and typed errors callers test for.
//   - storecheck.go: the data dir read in full before Raft sees it, and a
//     start refused when the log or stable store is lost or damaged.
//   - storage.go: the stores Raft is given: checksums checked on every
//     entry written and read, failed writes reported to disk.go, which
//     makes a full disk an explicit, not-ready state.
//   - fsmadapter.go: the state machine as raft.FSM, the one place log
//     entries become fsm commands.
//   - leader.go: leadership from Raft's NotifyCh, a barrier, then
//     establishLeadership (the expiry table with every clock restarted) and
//     the leader loop (expiry ticks, removal of idle workers, compaction);
//     revokeLeadership drops it.
//   - expiry.go: the table of when each registered worker was last heard,
//     the absence rule, unreachable/reachable, the decisions to expire and
//     to remove; expire.go: one tick of it, from due leases to proposals,
//     with the guard against a cut-off leader expiring everyone;
//     presence.go: what the table says of a worker, for the API. The
//     table runs on an injected clock, so tests pause, skew and advance it.
//   - worker.go: Heartbeat and the long-poll Acquire, for registered
//     workers only; heartbeats.go: the beats of one term of office
//     (recorded on arrival, answered after a quorum check, verify.go,
//     which batches the checks of every caller waiting at once).
//   - apply.go: proposals with deadlines and typed errors; ReadBarrier and
//     State for linearizable and stale reads. quota.go: the leader's bound
//     on the state's size and a submitter's queued jobs.
//   - levels.go: rolling upgrades: the leader proposes an entry only when
//     every voter's build can apply it.
//   - membership.go: bootstrap-expect and join, keeping this node's entry
//     in the replicated node table current.
//   - peerrpc.go: the node-to-node RPC handlers; who may ask what, from the
//     identity the peer port authenticated.
//   - admin.go: add (with the claim confirmed at its address), remove and
//     transfer; status.go: members, status, leader, timings; metrics.go:
//     the node's counters.
//   - audit.go: audit records, proposed on the leader or sent to it.
//   - forward.go: the peer-port connections followers forward API
//     requests on.
//   - snapshot.go: an operator's backup and restore: the cluster's index,
//     the token floor, and a backup that lies about its time or counters
//     refused.
//   - chaos_*.go: build tags that each switch one guarantee off, for
//     jepsen-lite to prove it catches the loss (make chaos).
//
// Package cluster/api translates between the wire's messages and the state
// machine's commands. DESIGN.md explains the time model, the invariants
// the leader keeps, who may change the node table, and what happens at
// failover.
package cluster
