package cluster

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// A node that starts restores its newest snapshot into an empty state: at
// a million jobs, about 430 MB of objects allocated in a few seconds, all
// of which stay live, and about as much again of decoding garbage. With
// the collector's default target (GOGC=100) a collection starts each time
// the heap doubles, and each one marks everything restored so far again.
// While that restore runs, the target is restoreGCPercent: fewer
// collections, and the peak heap is still bounded by what the restore
// allocates, since nothing else is live yet (BenchmarkRestore1M in fsm
// measures both targets and their peak heap). A higher target the operator
// set (GOGC) is kept, GOGC=off is left alone, and a memory limit
// (GOMEMLIMIT) still applies. A snapshot a running node installs from the
// leader is restored at the operator's target: its old state stays live
// until the new one replaces it, and a higher target could let the heap
// grow to several times the state.
const restoreGCPercent = 400

var restoreGC struct {
	mu      sync.Mutex
	running int  // restores under way
	old     int  // the target before the first of them
	raised  bool // whether the first of them raised it
}

// gcPercent reads the collector's target without changing it: -1 when the
// collector is off.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return int(int64(s[0].Value.Uint64())) // off reads as uint64(-1)
}

// raiseGCForRestore raises the collector's target for a restore; the
// returned func puts back what was there when the last restore ends.
func raiseGCForRestore() (done func()) {
	g := &restoreGC
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running == 0 {
		g.old = gcPercent()
		g.raised = g.old >= 0 && g.old < restoreGCPercent
		if g.raised {
			debug.SetGCPercent(restoreGCPercent)
		}
	}
	g.running++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.running--; g.running == 0 && g.raised {
			debug.SetGCPercent(g.old)
		}
	}
}
