package cluster

import (
	"runtime/debug"
	"sync"
)

// A restore builds the whole state at once: at a million jobs, 430 MB of
// objects that all stay live, allocated in a few seconds. With the
// collector's default target (GOGC=100) the heap doubles only a few times
// between collections, and every collection marks everything restored so
// far again: much of a restore's CPU is that marking. Nearly every byte a
// restore allocates stays live, so a higher target costs little extra
// memory (the peak is bounded by what the restore allocates, about twice
// the state) and saves most of those collections. While a restore runs,
// the target is restoreGCPercent; a higher target the operator set (GOGC)
// is kept, GOGC=off is left alone, and a memory limit (GOMEMLIMIT) still
// applies. BenchmarkRestore1M in fsm measures both targets.
const restoreGCPercent = 400

var restoreGC struct {
	mu      sync.Mutex
	running int // restores under way
	old     int // the target before the first of them
}

// raiseGCForRestore raises the collector's target for a restore; the
// returned func puts back what was there when the last restore ends.
func raiseGCForRestore() (done func()) {
	g := &restoreGC
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running == 0 {
		g.old = debug.SetGCPercent(restoreGCPercent)
		if g.old < 0 || g.old >= restoreGCPercent {
			debug.SetGCPercent(g.old)
		}
	}
	g.running++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.running--; g.running == 0 {
			debug.SetGCPercent(g.old)
		}
	}
}
