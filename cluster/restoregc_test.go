package cluster

import (
	"bytes"
	"io"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/fsm"
)

// readSpy records the collector's target when the restore first reads.
type readSpy struct {
	io.Reader
	once   sync.Once
	during int
}

func (r *readSpy) Read(p []byte) (int, error) {
	r.once.Do(func() { r.during = gcPercent() })
	return r.Reader.Read(p)
}

func (r *readSpy) Close() error { return nil }

// The restore of a starting node runs with the collector's target raised
// to restoreGCPercent and puts back the operator's afterwards: a lower one,
// a higher one kept as it is, GOGC=off left off. A failed restore puts it
// back too. A running node's restore (a snapshot from the leader, its old
// state still live) keeps the operator's target.
func TestRestoreRaisesTheGCTarget(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	var snap bytes.Buffer
	if _, err := fsm.New().Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		starting    bool
		set, during int
		data        []byte
	}{
		{"default", true, 100, restoreGCPercent, snap.Bytes()},
		{"higher kept", true, 800, 800, snap.Bytes()},
		{"off kept", true, -1, -1, snap.Bytes()},
		{"failed restore", true, 50, restoreGCPercent, []byte("not a snapshot")},
		{"running node", false, 100, 100, snap.Bytes()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(tc.set)
			a := &raftFSM{f: fsm.New(), halt: func(error) {}}
			a.starting.Store(tc.starting)
			spy := &readSpy{Reader: bytes.NewReader(tc.data)}
			err := a.Restore(spy)
			if (err != nil) != (tc.name == "failed restore") {
				t.Fatalf("restore: %v", err)
			}
			if spy.during != tc.during {
				t.Fatalf("the target during the restore was %d, want %d", spy.during, tc.during)
			}
			if got := gcPercent(); got != tc.set {
				t.Fatalf("the target after the restore is %d, want %d back", got, tc.set)
			}
		})
	}
}

// Restores that overlap put back the target the first one found, once the
// last one ends.
func TestOverlappingRestoresPutBackTheTarget(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	first, second := raiseGCForRestore(), raiseGCForRestore()
	defer func() { // a failed check must not leave a restore counted
		if first != nil {
			first()
		}
		if second != nil {
			second()
		}
	}()
	first()
	first = nil
	if got := gcPercent(); got != restoreGCPercent {
		t.Fatalf("one restore still running, the target is %d", got)
	}
	second()
	second = nil
	if got := gcPercent(); got != 100 {
		t.Fatalf("after both, the target is %d, want 100", got)
	}
}
