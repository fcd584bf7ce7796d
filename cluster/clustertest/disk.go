package clustertest

import (
	"os"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// DiskFaults injects faults into one node's Raft log and stable store
// (through cluster.Config.WrapStores): writes that fail as on a full disk,
// Fail(err) until Heal; and a log entry that reads back damaged (Rot).
type DiskFaults struct {
	err atomic.Pointer[error]
	rot atomic.Uint64
	// appendsOnly limits Fail to log appends (StoreLogs): deletions and
	// the stable store go through, as when space runs out between a
	// truncation and the append after it.
	appendsOnly atomic.Bool
	// Refused counts the log appends refused; RefusedAfterDelete those
	// refused right after a deletion of the log's entries.
	Refused, RefusedAfterDelete atomic.Uint64
	deleted                     atomic.Bool
	// hold, while set, is closed to let the log appends waiting on it go on
	// (HoldAppends); holding is the last index of the batch waiting, and
	// stored the last index of the last batch the store took.
	hold            atomic.Pointer[chan struct{}]
	holding, stored atomic.Uint64
}

// HoldAppends makes every log append wait until the returned release is
// called, as a slow disk would. Holding tells the batch waiting.
func (d *DiskFaults) HoldAppends() (release func()) {
	ch := make(chan struct{})
	d.hold.Store(&ch)
	var once sync.Once
	return func() {
		once.Do(func() {
			d.hold.Store(nil)
			close(ch)
		})
	}
}

// Holding is the last index of a log append waiting on HoldAppends, 0 if
// none has waited since the last release.
func (d *DiskFaults) Holding() uint64 { return d.holding.Load() }

// Stored is the last index of the last batch the log store took.
func (d *DiskFaults) Stored() uint64 { return d.stored.Load() }

// FailAppends makes every log append (only) return errno, until Heal.
func (d *DiskFaults) FailAppends(errno error) {
	d.appendsOnly.Store(true)
	d.Fail(errno)
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
func (d *DiskFaults) Heal() {
	d.err.Store(nil)
	d.appendsOnly.Store(false)
}

func (d *DiskFaults) failing() error {
	if p := d.err.Load(); p != nil {
		return *p
	}
	return nil
}

// failingOther is failing for a write other than a log append.
func (d *DiskFaults) failingOther() error {
	if d.appendsOnly.Load() {
		return nil
	}
	return d.failing()
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
	deleted := f.d.deleted.Swap(false)
	if err := f.d.failing(); err != nil {
		f.d.Refused.Add(1)
		if deleted {
			f.d.RefusedAfterDelete.Add(1)
		}
		return err
	}
	if p := f.d.hold.Load(); p != nil && len(logs) > 0 {
		f.d.holding.Store(logs[len(logs)-1].Index)
		<-*p
		f.d.holding.Store(0)
	}
	if err := f.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	if len(logs) > 0 {
		f.d.stored.Store(logs[len(logs)-1].Index)
	}
	return nil
}

func (f *faultyLog) DeleteRange(lo, hi uint64) error {
	if err := f.d.failingOther(); err != nil {
		return err
	}
	f.d.deleted.Store(true)
	return f.LogStore.DeleteRange(lo, hi)
}

type faultyStable struct {
	raft.StableStore
	d *DiskFaults
}

func (f *faultyStable) Set(k, v []byte) error {
	if err := f.d.failingOther(); err != nil {
		return err
	}
	return f.StableStore.Set(k, v)
}

func (f *faultyStable) SetUint64(k []byte, v uint64) error {
	if err := f.d.failingOther(); err != nil {
		return err
	}
	return f.StableStore.SetUint64(k, v)
}
