package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// scaleSetupConcurrency is how many setup calls scale keeps in flight, over
// its few connections: enough for Raft to batch hundreds of commands per
// log write.
const scaleSetupConcurrency = 256

// scaleSetupConns are the connections (per node) of setup's calls, apart
// from the heartbeats'.
const scaleSetupConns = 2

// scaleMaxInFlight bounds the heartbeats in flight: a second of the default
// rate (100,000 workers every 10 s). A healthy cluster answers in
// milliseconds and keeps a few hundred in flight; one far behind gets the
// rest counted as unsent rather than the bench's memory.
const scaleMaxInFlight = 10_000

// runScale proves the service at scale on one local cluster. Setup
// (untimed, reported with its own durations and rates): Workers workers
// registered, Workers×Leases jobs submitted, each worker acquiring Leases
// of them, started. The workers heartbeat on schedule from the moment they
// hold their leases (beats.go): one heartbeat per renew each, open loop.
// The window measures those heartbeats and the leader's expiry work. After
// it, under the same heartbeat load: the leader's memory per live lease,
// the time to write a snapshot of the whole state, and a follower killed
// and restarted, timed to ready.
func runScale(ctx context.Context, e *env) (*Result, error) {
	lc := e.cfg.Cluster
	workers, per := e.cfg.Workers, e.cfg.Leases
	leases := workers * per
	leader, err := lc.Leader(ctx)
	if err != nil {
		return nil, err
	}
	base, err := e.memory(ctx, leader)
	if err != nil {
		return nil, fmt.Errorf("%w: the empty cluster's memory: %w", ErrSetup, err)
	}
	e.logf("scale: %d workers x %d leases = %d; renew %s, so %.0f heartbeats/s; empty leader heap %.1f MB",
		workers, per, leases, e.timings.renew, float64(workers)/e.timings.renew.Seconds(), mib(base.heap.inuse))

	setupCfg := *e.cfg
	setupCfg.Conns = scaleSetupConns
	setupFleet, err := newFleet(&setupCfg)
	if err != nil {
		return nil, err
	}
	defer setupFleet.close()
	fl := newScaleFleet(e, setupFleet, workers, per)
	if !e.cfg.Unary {
		fl.mux = newBeatMux(ctx, e.f)
		defer fl.mux.close()
	}
	loop := startBeatLoop(ctx, workers, e.timings.renew, scaleMaxInFlight, fl.beat, fl.unsent)
	defer loop.stop()

	t0 := time.Now()
	if err := fl.submitAll(ctx, leases, scaleSetupConcurrency); err != nil {
		return nil, err
	}
	submitted := time.Since(t0)
	e.logf("scale: submitted %d jobs in %s (%.0f/s)", leases, submitted.Round(time.Millisecond), float64(leases)/submitted.Seconds())
	t1 := time.Now()
	if err := fl.holdAll(ctx, workers, scaleSetupConcurrency, loop.setReady); err != nil {
		return nil, err
	}
	held := time.Since(t1)
	setup := time.Since(t0)
	e.logf("scale: %d workers registered and holding %d leases in %s (%.0f workers/s); setup %s",
		workers, leases, held.Round(time.Millisecond), float64(workers)/held.Seconds(), setup.Round(time.Second))

	// Leadership may have moved during setup: what is measured from here
	// on is the leader's.
	if leader, err = lc.Leader(ctx); err != nil {
		return nil, err
	}
	// The window opens a grace after the last worker started heartbeating
	// (or after the warmup, if longer): every worker is on schedule, and
	// the leader's first check of every worker, a grace after it was first
	// heard, has come and gone, so the expiry work seen is the steady one.
	from := time.Now().Add(max(e.cfg.Warmup, e.timings.grace))
	win, err := loop.setWindow(from, from.Add(e.cfg.Duration))
	if err != nil {
		return nil, err
	}
	fl.window.Store(win)
	if !sleepUntil(ctx, win.from) {
		return nil, ctx.Err()
	}
	a := e.mark(ctx)
	looksA, err := e.gauge(ctx, leader, "leasehold_expiry_workers_looked_total")
	if err != nil {
		return nil, err
	}
	if !sleepUntil(ctx, win.to) {
		return nil, ctx.Err()
	}
	b := e.mark(ctx)
	looksB, err := e.gauge(ctx, leader, "leasehold_expiry_workers_looked_total")
	if err != nil {
		return nil, err
	}
	e.logf("scale: window over; waiting for its last heartbeats")
	if err := win.settle(ctx); err != nil {
		return nil, err
	}

	// After the window the workers go on heartbeating, as a real fleet
	// would while a node is inspected or restarted.
	after, err := e.afterWindow(ctx, leader, base)
	if err != nil {
		return nil, err
	}
	loop.stop()
	live, err := e.gauge(ctx, leader, "leasehold_live_leases")
	if err != nil {
		return nil, err
	}

	fl.mu.Lock()
	st := fl.win
	errsTotal, notKeepTotal := fl.errsTotal, fl.notKeepTotal
	kindsTotal := maps.Clone(fl.kindsTotal)
	fl.mu.Unlock()
	p := &phase{start: win.from, end: win.to, ops: st.ok, errs: st.errs, hist: st.hist, errKinds: st.kinds}
	r := e.result(p, between(a, b), 0)
	r.Concurrency = workers
	window := win.to.Sub(win.from).Seconds()
	r.add("workers", workers)
	r.add("leases_per_worker", per)
	r.add("leases", leases)
	r.add("conns", e.cfg.Conns)
	r.add("renew_ms", e.timings.renew)
	r.add("grace_ms", e.timings.grace)
	r.add("setup_s", num(setup.Seconds(), 1))
	r.add("setup_submit_s", num(submitted.Seconds(), 1))
	r.add("setup_submits_per_s", num(float64(leases)/submitted.Seconds(), 0))
	r.add("setup_hold_s", num(held.Seconds(), 1))
	r.add("setup_workers_per_s", num(float64(workers)/held.Seconds(), 0))
	r.add("setup_leases_per_s", num(float64(leases)/held.Seconds(), 0))
	r.add("setup_retries", fl.setupRetries.Load())

	r.add("hb_due", st.due)
	r.add("hb_missed", st.missed)
	r.add("hb_unsent", st.unsent)
	r.add("hb_late", st.late)
	r.add("hb_send_lag_p99_ms", st.lag.quantile(0.99))
	r.add("hb_send_lag_max_ms", st.lag.max)
	r.add("hb_gap_max_ms", fl.closeGaps(win))
	r.add("leases_renewed_s", num(float64(st.ok*int64(per))/window, 0))
	r.add("not_keep", st.notKeep)

	// The leader's expiry work: looks at workers whose check came due,
	// against the heartbeats (workers/renew) and what a full scan of every
	// worker on every tick would cost.
	tick := min(e.timings.renew/2, e.timings.grace/4)
	looksS := (looksB - looksA) / window
	r.add("workers_per_renew_s", num(float64(workers)/e.timings.renew.Seconds(), 0))
	r.add("expiry_looks_s", num(looksS, 0))
	r.add("expiry_looks_per_worker_grace", num(looksS*e.timings.grace.Seconds()/float64(workers), 2))
	r.add("expiry_full_scan_looks_s", num(float64(workers)/tick.Seconds(), 0))

	r.add("live_leases", int64(live))
	r.add("heap_base_bytes", base.heap.inuse)
	r.add("heap_inuse_bytes", after.mem.heap.inuse)
	r.add("heap_alloc_bytes", after.mem.heap.alloc)
	r.add("mem_per_lease_bytes", num(perLease(after.mem.heap.inuse, base.heap.inuse, after.liveAtMem), 0))
	r.add("rss_base_bytes", base.rss)
	r.add("rss_bytes", after.mem.rss)
	r.add("rss_per_lease_bytes", num(perLease(after.mem.rss, base.rss, after.liveAtMem), 0))
	r.add("snapshot_s", num(after.snapshot.Seconds(), 3))
	r.add("snapshot_bytes", after.snapshotBytes)
	r.add("raft_snapshot_s", num(after.raftSnapshotS, 3))
	r.add("raft_snapshot_bytes", num(after.raftSnapshotBytes, 0))
	r.add("restart_node", leaderName(after.restarted))
	r.add("restart_ready_s", num(after.ready.Seconds(), 3))
	r.add("restart_applied_behind", after.behind)
	r.add("restart_caught_up", after.caughtUp)
	caughtUp := math.NaN()
	if after.caughtUp {
		caughtUp = after.caughtUpAfter.Seconds()
	}
	r.add("restart_caught_up_s", num(caughtUp, 3))
	// The restarted follower's heap over the empty leader's, per lease it
	// holds: a state restored from a snapshot against the leader's, built
	// by applying the log (mem_per_lease_bytes; live_per_lease_bytes
	// counts live objects alone, without the spans' free room).
	r.add("live_per_lease_bytes", num(perLease(after.mem.heap.alloc, base.heap.alloc, after.liveAtMem), 0))
	r.add("restart_mem_per_lease_bytes", num(perLease(after.restartMem.heap.inuse, base.heap.inuse, after.liveAtRestart), 0))
	r.add("restart_live_per_lease_bytes", num(perLease(after.restartMem.heap.alloc, base.heap.alloc, after.liveAtRestart), 0))

	r.add("hb_errs_total", errsTotal)
	// What failed over the whole run (setup and restart included), by kind.
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(kindsTotal)) {
		kinds = append(kinds, fmt.Sprintf("%s:%d", k, kindsTotal[k]))
	}
	if len(kinds) == 0 {
		kinds = []string{"none"}
	}
	r.add("hb_errs_total_kinds", strings.Join(kinds, ","))
	r.add("not_keep_total", notKeepTotal)
	r.add("leases_lost", int64(leases)-int64(live))
	return r, nil
}

// mib is bytes in MiB, for progress lines.
func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// perLease is the memory the leases added, per lease.
func perLease(now, base uint64, leases float64) float64 {
	if leases <= 0 {
		return math.NaN()
	}
	return (float64(now) - float64(base)) / leases
}

// nodeMemory is a server's memory: its Go heap after a forced GC, and its
// resident set.
type nodeMemory struct {
	heap heapStats
	rss  uint64
}

func (e *env) memory(ctx context.Context, i int) (nodeMemory, error) {
	h, err := e.probe.heap(ctx, e.cfg.Endpoints[i])
	if err != nil {
		return nodeMemory{}, err
	}
	pid := e.cfg.Cluster.PIDs()[i]
	if pid == 0 {
		return nodeMemory{}, fmt.Errorf("node%d is not running", i+1)
	}
	rss, err := procRSS(pid)
	return nodeMemory{heap: h, rss: rss}, err
}

// gauge is one sample of node i's /metrics.
func (e *env) gauge(ctx context.Context, i int, name string) (float64, error) {
	g, err := e.probe.gauges(ctx, e.cfg.Endpoints[i], name)
	if err != nil {
		return 0, err
	}
	v, ok := g[name]
	if !ok {
		return 0, fmt.Errorf("node%d's /metrics has no %s", i+1, name)
	}
	return v, nil
}

// scaleAfter is what scale measures after its window.
type scaleAfter struct {
	mem               nodeMemory
	liveAtMem         float64
	snapshot          time.Duration
	snapshotBytes     int64
	raftSnapshotS     float64
	raftSnapshotBytes float64
	restarted         int
	ready             time.Duration
	behind            int64 // the leader's commit index at ready, less the node's applied index
	caughtUp          bool
	caughtUpAfter     time.Duration // from the restart, when caughtUp
	// restartMem is the restarted follower's memory once caught up (its
	// state restored from its last snapshot, the log after it applied),
	// and liveAtRestart the leases its state then held; zero and NaN when
	// it did not catch up.
	restartMem    nodeMemory
	liveAtRestart float64
}

// restartBound bounds the wait for a restarted node to be ready and to
// catch up.
const restartBound = 5 * time.Minute

func (e *env) afterWindow(ctx context.Context, leader int, base nodeMemory) (scaleAfter, error) {
	var out scaleAfter
	var err error
	if out.mem, err = e.memory(ctx, leader); err != nil {
		return out, err
	}
	if out.liveAtMem, err = e.gauge(ctx, leader, "leasehold_live_leases"); err != nil {
		return out, err
	}
	e.logf("scale: leader heap %.1f MB in use (empty: %.1f MB), RSS %.1f MB, %0.f live leases",
		mib(out.mem.heap.inuse), mib(base.heap.inuse), mib(out.mem.rss), out.liveAtMem)
	if f := e.cfg.HeapProfile; f != "" {
		if _, err := e.probe.download(ctx, e.cfg.Endpoints[leader], "/debug/pprof/heap?gc=1", f); err != nil {
			return out, fmt.Errorf("the leader's heap profile: %w", err)
		}
		e.logf("scale: the leader's heap profile is in %s", f)
	}

	path := filepath.Join(e.cfg.Cluster.Dir(), "scale-snapshot.bin")
	t := time.Now()
	out.snapshotBytes, err = e.probe.download(ctx, e.cfg.Endpoints[leader], "/v1/snapshot", path)
	out.snapshot = time.Since(t)
	os.Remove(path)
	if err != nil {
		return out, err
	}
	g, err := e.probe.gauges(ctx, e.cfg.Endpoints[leader], "leasehold_snapshot_last_seconds", "leasehold_snapshot_last_bytes")
	if err != nil {
		return out, err
	}
	out.raftSnapshotS, out.raftSnapshotBytes = math.NaN(), math.NaN()
	if g["leasehold_snapshot_last_bytes"] > 0 {
		out.raftSnapshotS, out.raftSnapshotBytes = g["leasehold_snapshot_last_seconds"], g["leasehold_snapshot_last_bytes"]
	}
	e.logf("scale: snapshot of %.1f MB downloaded in %s", mib(uint64(out.snapshotBytes)), out.snapshot.Round(time.Millisecond))
	if !math.IsNaN(out.raftSnapshotS) {
		e.logf("scale: the leader's last Raft snapshot: %.1f MB in %.3f s", out.raftSnapshotBytes/(1<<20), out.raftSnapshotS)
	}
	return out, e.restartFollower(ctx, leader, &out)
}

// restartFollower kills a follower with SIGKILL, starts it again on its
// data and times it to ready (/readyz 200), then to having applied what
// the leader had committed at that moment.
func (e *env) restartFollower(ctx context.Context, leader int, out *scaleAfter) error {
	lc := e.cfg.Cluster
	f := (leader + 1) % len(e.cfg.Endpoints)
	out.restarted = f
	if err := lc.Kill(f); err != nil {
		return err
	}
	t0 := time.Now()
	if err := lc.Restart(f); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, restartBound)
	defer cancel()
	if err := pollUntil(ctx, func() bool {
		ready, err := lc.Ready(ctx, f)
		return err == nil && ready
	}); err != nil {
		return fmt.Errorf("node%d not ready %s after its restart: %w", f+1, restartBound, err)
	}
	out.ready = time.Since(t0)
	commit, err1 := e.gauge(ctx, leader, "leasehold_raft_commit_index")
	applied, err2 := e.gauge(ctx, f, "leasehold_raft_applied_index")
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	out.behind = int64(commit) - int64(applied)
	e.logf("scale: node%d ready %s after its restart, %d entries behind the leader's commit", f+1, out.ready.Round(time.Millisecond), out.behind)
	err := pollUntil(ctx, func() bool {
		a, err := e.gauge(ctx, f, "leasehold_raft_applied_index")
		return err == nil && a >= commit
	})
	out.caughtUp, out.caughtUpAfter = err == nil, time.Since(t0)
	out.liveAtRestart = math.NaN()
	if !out.caughtUp {
		return nil
	}
	if out.restartMem, err = e.memory(ctx, f); err != nil {
		return err
	}
	if out.liveAtRestart, err = e.gauge(ctx, f, "leasehold_live_leases"); err != nil {
		return err
	}
	e.logf("scale: node%d's heap once caught up %.1f MB in use, %.1f MB live, %0.f live leases",
		f+1, mib(out.restartMem.heap.inuse), mib(out.restartMem.heap.alloc), out.liveAtRestart)
	return nil
}

// pollUntil calls cond every 20 ms until it holds or ctx ends.
func pollUntil(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
