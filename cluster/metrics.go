package cluster

import "time"

// Metrics are a node's counters, for /metrics.
type Metrics struct {
	LogWrites    uint64 // batches written (and fsynced) to the Raft log
	LogEntries   uint64 // entries written to the Raft log
	LastIndex    uint64
	CommitIndex  uint64
	AppliedIndex uint64
	Term         uint64
	Leader       bool
	WorkersTimed int
	LiveLeases   int
	LastToken    uint64
	Jobs         map[string]int
	// RaftRPCsRefused counts Raft messages the guard refused (terms or
	// indexes out of range); AuditsDropped, audit records never recorded.
	RaftRPCsRefused uint64
	AuditsDropped   uint64
	// ExpiryWorkersLooked counts the worker checks the leader's expiry ticks
	// looked at while this node led: about one per worker per grace.
	ExpiryWorkersLooked uint64
	// SnapshotLastBytes and SnapshotLastDuration are the size and the write
	// time of the last Raft snapshot this node persisted; zero before one.
	SnapshotLastBytes    int64
	SnapshotLastDuration time.Duration
}

// Metrics returns the node's counters.
func (n *Node) Metrics() Metrics {
	st := n.Status()
	fs := n.fsm.Stats()
	m := Metrics{
		LogWrites: n.logs.writes.Load(), LogEntries: n.logs.entries.Load(), LastIndex: st.LastIndex,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, Term: st.Term, Leader: st.State == "Leader",
		WorkersTimed: st.WorkersTimed, LiveLeases: fs.LiveLeases, LastToken: fs.LastToken, Jobs: map[string]int{},
		RaftRPCsRefused: n.guard.Dropped(), AuditsDropped: n.audits.dropped.Load(),
		ExpiryWorkersLooked: n.expiryLooked.Load(),
	}
	if n.snapshots != nil {
		last := n.snapshots.lastPersisted()
		m.SnapshotLastBytes, m.SnapshotLastDuration = last.bytes, last.took
	}
	for s, c := range fs.Jobs {
		m.Jobs[s.String()] = c
	}
	return m
}
