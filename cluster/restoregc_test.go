package cluster

import (
	"bytes"
	"io"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/fsm"
)

// gcPercent reads the collector's target (setting it back at once).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

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

// A restore runs with the collector's target raised to restoreGCPercent,
// and puts back the operator's afterwards: a lower one, a higher one kept
// as it is, and GOGC=off left off. A failed restore puts it back too.
func TestRestoreRaisesTheGCTarget(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	var snap bytes.Buffer
	src := fsm.New()
	if _, err := src.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		set, during int
		data        []byte
	}{
		{"default", 100, restoreGCPercent, snap.Bytes()},
		{"higher kept", 800, 800, snap.Bytes()},
		{"off kept", -1, -1, snap.Bytes()},
		{"failed restore", 50, restoreGCPercent, []byte("not a snapshot")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(tc.set)
			a := &raftFSM{f: fsm.New(), halt: func(error) {}}
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
	first := raiseGCForRestore()
	second := raiseGCForRestore()
	first()
	if got := gcPercent(); got != restoreGCPercent {
		t.Fatalf("one restore still running, the target is %d", got)
	}
	second()
	if got := gcPercent(); got != 100 {
		t.Fatalf("after both, the target is %d, want 100", got)
	}
}
