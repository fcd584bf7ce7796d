package cluster

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/fsm"
)

// raftFSM adapts the lease state machine to raft.FSM. It is the only place
// Raft's log entries become fsm commands.
type raftFSM struct {
	f *fsm.FSM
}

// applyResult carries a command's result and its refusal back to the
// proposer through the ApplyFuture.
type applyResult struct {
	value any
	err   error
}

// Apply applies one committed entry. An entry this binary cannot decode,
// or an index out of order, stops the node: skipping it would make this
// replica diverge from the others (and an old binary must not skip a
// command type a newer leader wrote).
func (a *raftFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	v, err := a.f.Apply(l.Index, l.Data)
	if fsm.IsFatal(err) {
		panic(fmt.Sprintf("leasehold: cannot apply log entry %d: %v", l.Index, err))
	}
	return applyResult{value: v, err: err}
}

// Snapshot freezes the state (microseconds: see fsm/DESIGN.md); Persist
// streams it while applies go on.
func (a *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	return &raftSnapshot{s: a.f.Snapshot()}, nil
}

// Restore replaces the state with a snapshot; fsm keeps the old state if
// the snapshot is bad.
func (a *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return a.f.Restore(rc)
}

type raftSnapshot struct{ s *fsm.Snapshot }

func (r *raftSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := r.s.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (r *raftSnapshot) Release() {}
