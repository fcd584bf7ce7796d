package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	if r := a.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: good}).(applyResult); r.err != nil {
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
