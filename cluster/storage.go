package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/fsm"
)

// The stores Raft is given are wrapped here, so that a full disk is an
// explicit state of the node (disk.go) and a damaged entry is found where it
// is written or read. The checksum lives in the entry itself (fsm's codec),
// so the wrappers work the same over any log store (raft-boltdb today,
// raft-wal perhaps later, which adds a checksum of its own per record).

// logStore is the log store Raft writes through, beneath its cache. It
// counts writes for the metrics, makes a write that fails for lack of space
// a *DiskFullError, and checks the checksum of every command it writes or
// reads back (a CRC; nothing is decoded):
//
//   - A command that fails it on the way in is refused: a follower does
//     not store what a damaged leader sends, and a leader does not log a
//     proposal damaged in its memory (its append fails and it steps down).
//   - A command that fails it on the way out, damaged on disk, stops the
//     node. The entry is still handed to Raft: Raft panics on a read error
//     when it applies an entry, and the state machine refuses the entry
//     itself (raftFSM stops the node too); a follower it is sent to
//     refuses it at append, so the damage never spreads.
//
// It also keeps Raft's view of its log true when an append fails right
// after a truncation (ghosts.go).
type logStore struct {
	raft.LogStore
	path    string              // for messages: the store's file
	disk    *diskState          // told of every write
	corrupt func(error)         // stops the node
	took    prometheus.Observer // seconds per batch written
	writes  atomic.Uint64
	entries atomic.Uint64

	g ghosts
}

func (s *logStore) GetLog(index uint64, l *raft.Log) error {
	seen := s.g.gen.Load()
	err := s.LogStore.GetLog(index, l)
	if err != nil && s.g.mayHave(seen) {
		if s.g.read(index, l) {
			return nil
		}
		// An append may have written the ghosts since the first read.
		err = s.LogStore.GetLog(index, l)
	}
	if err != nil {
		return err
	}
	if l.Type == raft.LogCommand {
		if err := fsm.VerifyChecksum(l.Data); err != nil {
			s.corrupt(&StorageError{Path: s.path, Problem: fmt.Sprintf("log entry %d: %v", index, err)})
		}
	}
	return nil
}

// StoreLog and StoreLogs each count one batch (one fsync in raft-boltdb).
func (s *logStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s *logStore) StoreLogs(logs []*raft.Log) error {
	for _, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if err := fsm.VerifyChecksum(l.Data); err != nil {
			return fmt.Errorf("log entry %d refused before it was written: %w", l.Index, err)
		}
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	var storeLast uint64
	if len(s.g.run) > 0 || len(s.g.cut) > 0 {
		last, err := s.LogStore.LastIndex()
		if err != nil {
			return err
		}
		storeLast = last
	}
	batch := s.g.before(logs, storeLast)
	s.writes.Add(1)
	s.entries.Add(uint64(len(batch)))
	start := time.Now()
	err := s.LogStore.StoreLogs(batch)
	if s.took != nil {
		s.took.Observe(time.Since(start).Seconds())
	}
	s.g.stored(err == nil, storeLast)
	return s.disk.wrote(err, true)
}

// DeleteRange deletes [lo, hi] from the store and from the ghosts; a
// deletion of the log's tail is kept until the next append (ghosts.go).
func (s *logStore) DeleteRange(lo, hi uint64) error {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	first, ferr := s.LogStore.FirstIndex()
	last, lerr := s.LogStore.LastIndex()
	if ferr != nil || lerr != nil {
		return errors.Join(ferr, lerr)
	}
	cut := s.g.cutting(s.LogStore, first, last, lo, hi)
	if lo <= last {
		if err := s.disk.wrote(s.LogStore.DeleteRange(lo, min(hi, last)), false); err != nil {
			return err
		}
	}
	s.g.deleted(lo, hi, cut)
	return nil
}

// LastIndex counts the ghosts, which Raft believes written.
func (s *logStore) LastIndex() (uint64, error) {
	last, err := s.LogStore.LastIndex()
	if err != nil {
		return 0, err
	}
	return max(last, s.g.last()), nil
}

// IsMonotonic passes on what the store says (raft.MonotonicLogStore).
func (s *logStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// stableStore is the store Raft keeps its term and vote in. A write that
// fails for lack of space is a *DiskFullError, except the current term's:
// Raft panics when it cannot persist its term, so that write is retried
// until it succeeds (Raft waits, and the node is not ready meanwhile), or
// until the node's network is closed on the way down. Raft's goroutines
// then end without being able to tell any peer of the term that was not
// persisted (Node.stop closes the network before it waits for them), and
// the node restarts with its last persisted term, which is safe.
type stableStore struct {
	raft.StableStore
	disk    *diskState
	netDown <-chan struct{}
	// member is called after a term is first written (it writes
	// raft.member); it is not called again once it succeeds.
	member func() error
	marked atomic.Bool
}

func (s *stableStore) Set(k, v []byte) error {
	return s.disk.wrote(s.StableStore.Set(k, v), false)
}

func (s *stableStore) SetUint64(k []byte, v uint64) error {
	err := s.disk.wrote(s.StableStore.SetUint64(k, v), false)
	if !bytes.Equal(k, keyCurrentTerm) {
		return err
	}
	if errors.Is(err, ErrDiskFull) {
		s.disk.logger.Warn("term_write_waiting", "term", v, "reason", "Raft cannot go on until its term is on disk; retrying")
	}
	for wait := 10 * time.Millisecond; errors.Is(err, ErrDiskFull); wait = min(2*wait, time.Second) {
		select {
		case <-time.After(wait):
			err = s.disk.wrote(s.StableStore.SetUint64(k, v), false)
		case <-s.netDown:
			s.disk.logger.Warn("term_not_persisted", "term", v,
				"reason", "the disk is full and the node is stopping; the network is closed, so no peer learns of the term")
			return nil
		}
	}
	if err == nil && !s.marked.Load() {
		if merr := s.member(); merr != nil {
			s.disk.logger.Warn("member_mark_not_written", "error", merr)
		} else {
			s.marked.Store(true)
		}
	}
	return err
}

// snapshotStore tells the disk state of snapshot writes, Raft's own and
// those a leader sends.
type snapshotStore struct {
	raft.SnapshotStore
	disk *diskState
}

func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, s.disk.failed(err, true)
	}
	return &snapshotSink{SnapshotSink: sink, disk: s.disk}, nil
}

// snapshotSink reports failed writes; only a Close that succeeded (the
// state flushed and synced) shows there is room.
type snapshotSink struct {
	raft.SnapshotSink
	disk *diskState
}

func (s *snapshotSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	if err != nil {
		err = s.disk.failed(err, true)
	}
	return n, err
}

func (s *snapshotSink) Close() error {
	return s.disk.wrote(s.SnapshotSink.Close(), true)
}
