package clustertest

import (
	"os"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// DiskFaults injects faults into one node's Raft log and stable store
// (through cluster.Config.WrapStores): writes that fail as on a full disk,
// Fail(err) until Heal; and a log entry that reads back damaged (Rot).
type DiskFaults struct {
	err atomic.Pointer[error]
	rot atomic.Uint64
}

// Rot makes the command at index read back with one bit flipped, as if
// the disk had damaged it after it was written; 0 stops it.
func (d *DiskFaults) Rot(index uint64) { d.rot.Store(index) }

// Fail makes every write of the log and stable store return errno (as
// bbolt returns a failed write: an *os.PathError on raft.db).
func (d *DiskFaults) Fail(errno error) {
	err := error(&os.PathError{Op: "write", Path: "raft.db", Err: errno})
	d.err.Store(&err)
}

// Heal lets writes through again.
func (d *DiskFaults) Heal() { d.err.Store(nil) }

func (d *DiskFaults) failing() error {
	if p := d.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (d *DiskFaults) wrap(logs raft.LogStore, stable raft.StableStore) (raft.LogStore, raft.StableStore) {
	return &faultyLog{LogStore: logs, d: d}, &faultyStable{StableStore: stable, d: d}
}

type faultyLog struct {
	raft.LogStore
	d *DiskFaults
}

func (f *faultyLog) GetLog(index uint64, l *raft.Log) error {
	if err := f.LogStore.GetLog(index, l); err != nil {
		return err
	}
	if index == f.d.rot.Load() && l.Type == raft.LogCommand && len(l.Data) > 0 {
		l.Data = append([]byte(nil), l.Data...)
		l.Data[len(l.Data)/2] ^= 0x04
	}
	return nil
}

func (f *faultyLog) StoreLog(l *raft.Log) error { return f.StoreLogs([]*raft.Log{l}) }

// IsMonotonic passes on what the wrapped store says: Raft clears a
// monotonic store's log after a restore instead of leaving a gap.
func (f *faultyLog) IsMonotonic() bool {
	m, ok := f.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (f *faultyLog) StoreLogs(logs []*raft.Log) error {
	if err := f.d.failing(); err != nil {
		return err
	}
	return f.LogStore.StoreLogs(logs)
}

func (f *faultyLog) DeleteRange(lo, hi uint64) error {
	if err := f.d.failing(); err != nil {
		return err
	}
	return f.LogStore.DeleteRange(lo, hi)
}

type faultyStable struct {
	raft.StableStore
	d *DiskFaults
}

func (f *faultyStable) Set(k, v []byte) error {
	if err := f.d.failing(); err != nil {
		return err
	}
	return f.StableStore.Set(k, v)
}

func (f *faultyStable) SetUint64(k []byte, v uint64) error {
	if err := f.d.failing(); err != nil {
		return err
	}
	return f.StableStore.SetUint64(k, v)
}
