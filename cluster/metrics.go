package cluster

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
	}
	for s, c := range fs.Jobs {
		m.Jobs[s.String()] = c
	}
	return m
}
