package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/leasehold/leasehold/fsm"
)

func testDisk() *diskState { return &diskState{nodeID: "n1", logger: hclog.NewNullLogger()} }

// full is an *os.PathError as bbolt returns it for a write.
func full(errno syscall.Errno) error { return &os.PathError{Op: "write", Path: "raft.db", Err: errno} }

func TestDiskStateFollowsWrites(t *testing.T) {
	d := testDisk()
	if d.err() != nil || d.wrote(nil, true) != nil {
		t.Fatal("a fresh disk is full")
	}
	other := errors.New("io error")
	if err := d.wrote(other, true); err != other || d.err() != nil {
		t.Fatalf("an error that is not about space: %v, full %v", err, d.err())
	}
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		err := d.wrote(full(errno), true)
		var df *DiskFullError
		if !errors.Is(err, ErrDiskFull) || !errors.Is(err, errno) || !errors.As(err, &df) || df.NodeID != "n1" ||
			err.Error() != "disk full on node n1: write raft.db: "+errno.Error() {
			t.Fatalf("%v: %v", errno, err)
		}
		if !errors.Is(d.err(), ErrDiskFull) {
			t.Fatal("the state does not say full")
		}
		// A buffered write that succeeds proves nothing, nor does a light
		// write after a heavy one failed; a heavy write does.
		if d.failed(other, true) != other || d.err() == nil {
			t.Fatal("cleared by a failure")
		}
		if d.wrote(nil, false) != nil || d.err() == nil {
			t.Fatal("a light write cleared a failed heavy one")
		}
		if d.wrote(nil, true) != nil || d.err() != nil {
			t.Fatal("a successful heavy write did not clear it")
		}
	}
	// A failed light write is cleared by a light one.
	d.wrote(full(syscall.ENOSPC), false)
	if d.err() == nil || d.wrote(nil, false) != nil || d.err() != nil {
		t.Fatal("a light failure was not cleared by a light write")
	}
}

// failingStable fails writes while fail is set.
type failingStable struct {
	*raft.InmemStore
	fail atomic.Bool
}

func (f *failingStable) SetUint64(k []byte, v uint64) error {
	if f.fail.Load() {
		return full(syscall.ENOSPC)
	}
	return f.InmemStore.SetUint64(k, v)
}

func (f *failingStable) Set(k, v []byte) error {
	if f.fail.Load() {
		return full(syscall.ENOSPC)
	}
	return f.InmemStore.Set(k, v)
}

// Raft panics when it cannot persist its term: that write waits for room
// (the node is not ready meanwhile) instead of failing; a vote fails at
// once (Raft then simply does not vote). On the way down, once the network
// is closed, the waiting write returns without having written.
func TestTermWriteWaitsForRoom(t *testing.T) {
	inner := &failingStable{InmemStore: raft.NewInmemStore()}
	d := testDisk()
	netDown := make(chan struct{})
	var marks atomic.Int32
	s := &stableStore{StableStore: inner, disk: d, netDown: netDown, member: func() error { marks.Add(1); return nil }}

	inner.fail.Store(true)
	if err := s.Set([]byte("LastVoteCand"), []byte("x")); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("a vote on a full disk: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.SetUint64(keyCurrentTerm, 7) }()
	for deadline := time.Now().Add(5 * time.Second); d.err() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the failed term write was not recorded")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the term write returned on a full disk: %v", err)
	default:
	}
	inner.fail.Store(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v, _ := inner.GetUint64(keyCurrentTerm); v != 7 || d.err() != nil || marks.Load() != 1 {
		t.Fatalf("term %d, disk %v, marks %d", v, d.err(), marks.Load())
	}

	inner.fail.Store(true)
	go func() { done <- s.SetUint64(keyCurrentTerm, 8) }()
	close(netDown)
	if err := <-done; err != nil {
		t.Fatalf("the waiting term write at shutdown: %v", err)
	}
	if v, _ := inner.GetUint64(keyCurrentTerm); v != 7 || marks.Load() != 1 {
		t.Fatalf("term %d after shutdown, marks %d", v, marks.Load())
	}
}

// The log store checks every command's checksum: one damaged on the way
// in is refused before it is written; one damaged on disk (written behind
// the store's back here) stops the node when it is read, and is still
// handed over (Raft would panic on a read error; the state machine refuses
// it). Version 1 commands and other entry types pass.
func TestLogStoreChecksEntries(t *testing.T) {
	var stopped error
	inner := raft.NewInmemStore()
	s := &logStore{LogStore: inner, path: "raft.db", disk: testDisk(), corrupt: func(err error) { stopped = err }}
	good, _ := fsm.Encode(1, &fsm.RemoveNode{NodeID: "n2"})
	bad := append([]byte(nil), good...)
	bad[3] ^= 0xff
	v1 := []byte{1, byte(fsm.CmdRemoveNode), 2, 2, 'n', '2'}
	for _, l := range []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: good},
		{Index: 2, Type: raft.LogCommand, Data: v1},
		{Index: 3, Type: raft.LogNoop},
	} {
		if err := s.StoreLog(l); err != nil {
			t.Fatal(err)
		}
		var got raft.Log
		if err := s.GetLog(l.Index, &got); err != nil || stopped != nil {
			t.Fatalf("entry %d: %v, stopped %v", l.Index, err, stopped)
		}
	}
	err := s.StoreLogs([]*raft.Log{{Index: 4, Type: raft.LogCommand, Data: good}, {Index: 5, Type: raft.LogCommand, Data: bad}})
	if !errors.Is(err, fsm.ErrCorrupt) || !strings.Contains(err.Error(), "log entry 5 refused before it was written") {
		t.Fatalf("a damaged entry to store: %v", err)
	}
	if last, _ := inner.LastIndex(); last != 3 || stopped != nil {
		t.Fatalf("after a refused batch: last index %d, stopped %v", last, stopped)
	}
	if err := inner.StoreLog(&raft.Log{Index: 4, Type: raft.LogCommand, Data: bad}); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := s.GetLog(4, &got); err != nil || !bytes.Equal(got.Data, bad) {
		t.Fatalf("a damaged entry read: %v", err)
	}
	if !errors.Is(stopped, ErrStorage) || !strings.Contains(stopped.Error(), "raft.db: log entry 4: corrupt encoding: checksum mismatch") {
		t.Fatalf("stopped with %v", stopped)
	}
	if s.writes.Load() != 3 || s.entries.Load() != 3 {
		t.Fatalf("counted %d writes of %d entries", s.writes.Load(), s.entries.Load())
	}
}

// An entry the state machine cannot decode stops the node, with the index;
// it and every later entry are not applied, and no snapshot is taken of a
// state that stopped short of Raft's applied index.
func TestApplyStopsOnAnEntryItCannotDecode(t *testing.T) {
	var stopped []error
	a := &raftFSM{f: fsm.New(), halt: func(err error) { stopped = append(stopped, err) }}
	good, _ := fsm.Encode(1, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1})
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 0x80
	if r, refused := a.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: good}).(applyResult); refused {
		t.Fatal(r.err)
	}
	if r := a.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: bad}).(applyResult); !errors.Is(r.err, ErrShutdown) {
		t.Fatalf("the damaged entry's proposer was told %v", r.err)
	}
	later, _ := fsm.Encode(1, &fsm.RegisterWorker{WorkerID: "w2", Capacity: 1})
	if r := a.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: later}).(applyResult); !errors.Is(r.err, ErrShutdown) {
		t.Fatalf("an entry after it: %v", r.err)
	}
	if len(stopped) != 1 || !errors.Is(stopped[0], fsm.ErrCorrupt) ||
		!strings.HasPrefix(stopped[0].Error(), "log entry 2 cannot be applied: corrupt encoding: checksum mismatch") {
		t.Fatalf("stopped with %v", stopped)
	}
	if a.f.LastIndex() != 1 {
		t.Fatalf("applied up to %d", a.f.LastIndex())
	}
	if _, err := a.Snapshot(); err == nil {
		t.Fatal("a stopped state machine was snapshotted")
	}
}

// fakeSink fails its writes or its close as told.
type fakeSink struct {
	writeErr, closeErr error
}

func (f *fakeSink) Write(p []byte) (int, error) { return len(p), f.writeErr }
func (f *fakeSink) Close() error                { return f.closeErr }
func (f *fakeSink) ID() string                  { return "snap" }
func (f *fakeSink) Cancel() error               { return nil }

func TestSnapshotWritesTellTheDisk(t *testing.T) {
	d := testDisk()
	sink := &fakeSink{writeErr: full(syscall.ENOSPC)}
	s := &snapshotSink{SnapshotSink: sink, disk: d}
	if _, err := s.Write([]byte("x")); !errors.Is(err, ErrDiskFull) || d.err() == nil {
		t.Fatalf("a snapshot write on a full disk: %v", err)
	}
	sink.writeErr = nil
	if _, err := s.Write([]byte("x")); err != nil || d.err() == nil {
		t.Fatal("a buffered write cleared the state")
	}
	if err := s.Close(); err != nil || d.err() != nil {
		t.Fatalf("a snapshot written in full: %v, %v", err, d.err())
	}
}

// A node id lost beside Raft state is not replaced by a new random one.
func TestLostNodeIDRefused(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadNodeID(dir, "", true); !errors.Is(err, ErrStorage) || !strings.Contains(err.Error(), "node-id: is missing") {
		t.Fatalf("%v", err)
	}
	if id, err := loadNodeID(dir, "n7", true); err != nil || id != "n7" {
		t.Fatalf("an id given with the state: %s %v", id, err)
	}
	if id, err := loadNodeID(t.TempDir(), "", false); err != nil || !strings.HasPrefix(id, "node-") {
		t.Fatalf("a fresh node: %s %v", id, err)
	}
}

// BenchmarkOpenStorage is the start-up check of a data dir whose log holds
// as many entries as Raft keeps by default (trailing logs plus a snapshot
// interval's worth), each a submit with a 200-byte payload:
// go test -run '^$' -bench OpenStorage ./cluster/
func BenchmarkOpenStorage(b *testing.B) {
	const entries = 10240 + 8192
	dir := b.TempDir()
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, raftDBFile), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.SetUint64(keyCurrentTerm, 3); err != nil {
		b.Fatal(err)
	}
	var batch []*raft.Log
	for i := 1; i <= entries; i++ {
		data, err := fsm.Encode(1, &fsm.SubmitJob{Spec: fsm.JobSpec{ID: fmt.Sprintf("job-%08d", i), Queue: "q", Kind: "k",
			Payload: make([]byte, 200), MaxAttempts: 3, OnWorkerLost: fsm.LostRequeue, MaxWorkerLosses: 3}})
		if err != nil {
			b.Fatal(err)
		}
		batch = append(batch, &raft.Log{Index: uint64(i), Term: 3, Type: raft.LogCommand, Data: data})
		if len(batch) == 1024 || i == entries {
			if err := store.StoreLogs(batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	store.Close()
	b.ResetTimer()
	for range b.N {
		s, _, err := openStorage(dir, LogStoreBoltDB, 0)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// failingStores is an in-memory log store whose StoreLogs fails while
// fail is set, as on a full disk, leaving the store as it was.
type failingStores struct {
	*raft.InmemStore
	fail atomic.Bool
}

func (f *failingStores) StoreLogs(logs []*raft.Log) error {
	if f.fail.Load() {
		return &os.PathError{Op: "write", Path: "wal", Err: syscall.ENOSPC}
	}
	return f.InmemStore.StoreLogs(logs)
}

// Raft deletes a conflicting tail and then appends the leader's entries;
// when that append fails it still believes the tail is there. The store
// reads the deleted entries back (ghosts) until an append succeeds: Raft
// finds the conflict again, deletes again, and catches up once the disk
// takes writes. An append that follows the ghosts instead of replacing them
// writes them first. Without ghosts, entry 4 is "not found" for good and
// the follower never catches up (hashicorp/raft leaves its last index
// behind after that failure).
func TestLogStoreKeepsATailRaftStillBelieves(t *testing.T) {
	inner := &failingStores{InmemStore: raft.NewInmemStore()}
	s := &logStore{LogStore: inner, path: "wal", disk: testDisk(), corrupt: func(err error) { t.Fatal(err) }}
	entry := func(i, term uint64) *raft.Log { return &raft.Log{Index: i, Term: term, Type: raft.LogNoop} }
	if err := s.StoreLogs([]*raft.Log{entry(1, 1), entry(2, 1), entry(3, 1), entry(4, 1), entry(5, 1)}); err != nil {
		t.Fatal(err)
	}
	termAt := func(i uint64) uint64 {
		t.Helper()
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		return l.Term
	}
	leader := []*raft.Log{entry(4, 2), entry(5, 2), entry(6, 2)}

	// The conflicting tail 4..5 deleted, the leader's entries refused.
	if err := s.DeleteRange(4, 5); err != nil {
		t.Fatal(err)
	}
	inner.fail.Store(true)
	if err := s.StoreLogs(leader); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append on a full disk: %v", err)
	}
	if termAt(4) != 1 || termAt(5) != 1 {
		t.Fatal("the ghosts read back with other terms")
	}
	if last, _ := s.LastIndex(); last != 5 {
		t.Fatalf("last index %d with ghosts to 5", last)
	}
	if last, _ := inner.LastIndex(); last != 3 {
		t.Fatalf("the store's last index %d, want 3: ghosts are not written", last)
	}
	// Raft, seeing the conflict again, deletes again (the ghosts only) and
	// appends again, still refused; then the disk takes writes.
	for range 2 {
		if err := s.DeleteRange(4, 5); err != nil {
			t.Fatalf("deleting the ghosts: %v", err)
		}
		err := s.StoreLogs(leader)
		if !inner.fail.Load() {
			if err != nil {
				t.Fatalf("append once the disk takes writes: %v", err)
			}
			break
		}
		if !errors.Is(err, ErrDiskFull) || termAt(5) != 1 {
			t.Fatalf("a second refused append: %v; the ghosts must stay", err)
		}
		inner.fail.Store(false)
	}
	for i := uint64(4); i <= 6; i++ {
		if termAt(i) != 2 {
			t.Fatalf("entry %d has term %d after catching up, want 2", i, termAt(i))
		}
	}
	if s.g.any.Load() {
		t.Fatal("ghosts left after a successful append")
	}

	// Ghosts again (tail 6 deleted, append refused), and then an append
	// after them (the ghost matched the leader's entry, so Raft kept it):
	// the ghost is written first.
	if err := s.DeleteRange(6, 6); err != nil {
		t.Fatal(err)
	}
	inner.fail.Store(true)
	if err := s.StoreLogs([]*raft.Log{entry(6, 3)}); err == nil {
		t.Fatal("append on a full disk succeeded")
	}
	inner.fail.Store(false)
	if err := s.StoreLogs([]*raft.Log{entry(7, 3)}); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := inner.GetLog(6, &l); err != nil || l.Term != 2 {
		t.Fatalf("the ghost before an append after it: %+v, %v; want entry 6 of term 2 written", l, err)
	}
	if last, _ := inner.LastIndex(); last != 7 {
		t.Fatalf("the store's last index %d, want 7", last)
	}

	// A prefix deletion (compaction) keeps nothing.
	if err := s.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	inner.fail.Store(true)
	_ = s.StoreLogs([]*raft.Log{entry(8, 3)})
	inner.fail.Store(false)
	if s.g.any.Load() {
		t.Fatal("a prefix deletion left ghosts")
	}
}

// Ghosts follow what Raft believes through the less direct paths: a
// second truncation that starts inside them (a leader whose log matches
// the first of them) keeps the ones below it when its append fails too;
// an append after them writes them first, never a gap; an append that
// does not follow them (a snapshot installed past them) or a deletion of
// the whole log (after a restore) drops them, unwritten.
func TestLogStoreGhostsFollowRaft(t *testing.T) {
	entry := func(i, term uint64) *raft.Log { return &raft.Log{Index: i, Term: term, Type: raft.LogNoop} }
	setup := func(t *testing.T) (*logStore, *failingStores) {
		inner := &failingStores{InmemStore: raft.NewInmemStore()}
		s := &logStore{LogStore: inner, path: "wal", disk: testDisk(), corrupt: func(err error) { t.Fatal(err) }}
		if err := s.StoreLogs([]*raft.Log{entry(1, 1), entry(2, 1), entry(3, 1), entry(4, 1), entry(5, 1)}); err != nil {
			t.Fatal(err)
		}
		// Tail 3..5 deleted, the append refused: ghosts 3..5.
		if err := s.DeleteRange(3, 5); err != nil {
			t.Fatal(err)
		}
		inner.fail.Store(true)
		if err := s.StoreLogs([]*raft.Log{entry(3, 2)}); err == nil {
			t.Fatal("append on a full disk succeeded")
		}
		return s, inner
	}
	terms := func(s *logStore, from, to uint64) []uint64 {
		var out []uint64
		for i := from; i <= to; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil {
				out = append(out, 0)
				continue
			}
			out = append(out, l.Term)
		}
		return out
	}

	t.Run("a second truncation inside them", func(t *testing.T) {
		s, inner := setup(t)
		if err := s.DeleteRange(4, 5); err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs([]*raft.Log{entry(4, 3)}); err == nil {
			t.Fatal("append on a full disk succeeded")
		}
		if got := terms(s, 1, 5); !slices.Equal(got, []uint64{1, 1, 1, 1, 1}) {
			t.Fatalf("terms %v after a second refused append: ghost 3 must stay with 4 and 5", got)
		}
		inner.fail.Store(false)
		if err := s.DeleteRange(4, 5); err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs([]*raft.Log{entry(4, 3), entry(5, 3)}); err != nil {
			t.Fatal(err)
		}
		var stored []uint64
		for i := uint64(1); i <= 5; i++ {
			var l raft.Log
			if err := inner.GetLog(i, &l); err != nil {
				t.Fatalf("the store lacks %d: %v", i, err)
			}
			stored = append(stored, l.Term)
		}
		if !slices.Equal(stored, []uint64{1, 1, 1, 3, 3}) || s.g.any.Load() {
			t.Fatalf("stored terms %v, ghosts left %v", stored, s.g.any.Load())
		}
	})
	t.Run("an append after them", func(t *testing.T) {
		s, inner := setup(t)
		inner.fail.Store(false)
		if err := s.StoreLogs([]*raft.Log{entry(6, 3)}); err != nil {
			t.Fatal(err)
		}
		if last, _ := inner.LastIndex(); last != 6 {
			t.Fatalf("store ends at %d", last)
		}
		for i := uint64(3); i <= 5; i++ {
			var l raft.Log
			if err := inner.GetLog(i, &l); err != nil || l.Term != 1 {
				t.Fatalf("ghost %d not written before 6: %+v %v", i, l, err)
			}
		}
	})
	t.Run("a snapshot installed past them", func(t *testing.T) {
		s, inner := setup(t)
		inner.fail.Store(false)
		if err := s.StoreLogs([]*raft.Log{entry(101, 4)}); err != nil {
			t.Fatal(err)
		}
		if got := terms(s, 3, 5); !slices.Equal(got, []uint64{0, 0, 0}) || s.g.any.Load() {
			t.Fatalf("terms %v at 3..5 after an append past the ghosts: they must be dropped, unwritten", got)
		}
	})
	t.Run("the whole log deleted", func(t *testing.T) {
		s, inner := setup(t)
		last, _ := s.LastIndex()
		if err := s.DeleteRange(1, last); err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs([]*raft.Log{entry(101, 4)}); err == nil {
			t.Fatal("append on a full disk succeeded")
		}
		if s.g.any.Load() {
			t.Fatal("a deletion of the whole log left ghosts")
		}
		inner.fail.Store(false)
		if err := s.StoreLogs([]*raft.Log{entry(101, 4)}); err != nil {
			t.Fatal(err)
		}
		if first, _ := inner.FirstIndex(); first != 101 {
			t.Fatalf("store starts at %d, want 101", first)
		}
	})
}

// An entry applied without a refusal answers its proposer with the state
// machine's result itself, not boxed again (an allocation per entry on
// every node); a refused one carries the refusal.
func TestApplyAnswersTheResultItself(t *testing.T) {
	a := &raftFSM{f: fsm.New(), halt: func(err error) { t.Fatal(err) }}
	reg, _ := fsm.Encode(1, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1})
	acq, _ := fsm.Encode(1, &fsm.Acquire{WorkerID: "nobody", RequestID: "r", Queues: []string{"q"}, Max: 1})
	got := a.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: reg})
	if _, boxed := got.(applyResult); boxed {
		t.Fatalf("an applied entry answered %#v, want the state machine's result", got)
	}
	r, refused := a.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: acq}).(applyResult)
	if !refused || !errors.Is(r.err, fsm.ErrUnknownWorker) {
		t.Fatalf("an acquire by an unknown worker answered %#v, want its refusal", r)
	}
	f := fsm.New()
	want, err := f.Apply(1, reg)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("applied through Raft: %v; the state machine alone: %v, %v", got, want, err)
	}
}
