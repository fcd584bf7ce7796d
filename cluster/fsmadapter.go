package cluster

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/fsm"
)

// raftFSM adapts the lease state machine to raft.FSM. It is the only place
// Raft's log entries become fsm commands.
type raftFSM struct {
	f *fsm.FSM
	// halt stops the node; after it, nothing more is applied, snapshotted
	// or restored (stopped).
	halt    func(error)
	stopped atomic.Bool
	// starting is set while raft.NewRaft restores the newest snapshot it
	// can; restoreErr is a snapshot it could not restore then.
	starting   atomic.Bool
	restoreErr atomic.Pointer[error]
	// log says when a snapshot is on disk; persisted is the last one.
	log       hclog.Logger
	persisted atomic.Pointer[persistedSnapshot]
}

// persistedSnapshot is what writing one Raft snapshot cost: its size, and
// the time from the first byte written to the file closed (synced and
// renamed into place by Raft's snapshot store).
type persistedSnapshot struct {
	bytes int64
	took  time.Duration
}

// applyResult carries a command's refusal, and what result came with it,
// back to the proposer through the ApplyFuture. A command applied without
// one returns the state machine's result itself: boxing it again would
// cost an allocation per entry on every node, for a result only the
// leader's proposer reads.
type applyResult struct {
	value any
	err   error
}

// Apply applies one committed entry. An entry this binary cannot decode
// (its checksum fails, it is damaged, or its command type is newer than
// this binary), or an index out of order, stops the node: skipping it would
// make this replica diverge from the others. Neither it nor any later entry
// is applied; the proposer is told the node is shutting down.
func (a *raftFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if a.stopped.Load() {
		return applyResult{err: ErrShutdown}
	}
	v, err := a.f.Apply(l.Index, l.Data)
	if fsm.IsFatal(err) {
		a.stopped.Store(true)
		a.halt(fmt.Errorf("log entry %d cannot be applied: %w; the node stopped rather than skip it "+
			"(see \"Storage and recovery\" in docs/operations.md)", l.Index, err))
		return applyResult{err: ErrShutdown}
	}
	if err != nil {
		return applyResult{value: v, err: err}
	}
	return v
}

// Snapshot freezes the state (microseconds: see fsm/DESIGN.md); Persist
// streams it while applies go on. A stopped node has no state Raft could
// label with its applied index.
func (a *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	if a.stopped.Load() {
		return nil, ErrShutdown
	}
	return &raftSnapshot{s: a.f.Snapshot(), a: a}, nil
}

// Restore replaces the state with a snapshot; fsm keeps the old state if
// the snapshot is bad.
func (a *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if a.stopped.Load() {
		return ErrShutdown
	}
	err := a.f.Restore(rc)
	if err != nil && a.starting.Load() {
		a.restoreErr.CompareAndSwap(nil, &err)
	}
	return err
}

type raftSnapshot struct {
	s *fsm.Snapshot
	a *raftFSM
}

// Persist writes the frozen state while applies go on. Its duration is a
// measurement, not a decision, so it reads the real clock, not the node's.
func (r *raftSnapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	n, err := r.s.WriteTo(sink)
	if err != nil {
		sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return err
	}
	took := time.Since(start)
	r.a.persisted.Store(&persistedSnapshot{bytes: n, took: took})
	if r.a.log != nil {
		r.a.log.Info("snapshot_persisted", "id", sink.ID(), "bytes", n, "duration", took)
	}
	return nil
}

// lastPersisted is the last snapshot this node wrote; zero before the first.
func (a *raftFSM) lastPersisted() persistedSnapshot {
	if p := a.persisted.Load(); p != nil {
		return *p
	}
	return persistedSnapshot{}
}

// Release is Raft's word that Persist is over, whatever its outcome.
func (r *raftSnapshot) Release() { r.s.Release() }
