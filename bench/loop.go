package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// op is one operation of one caller. It returns errDrained when the job
// pool ran out, which ends the phase for every caller.
type op func(ctx context.Context) error

// phase is one closed-loop run of the callers and what it counted: only
// operations started inside it, the last of which may end after it.
type phase struct {
	start, end time.Time // end: planned, or when the pool ran out
	done       time.Time // the last operation ended
	ops, errs  int64
	hist       *hist
	errKinds   map[string]int64
	firstErr   error
	drained    bool
}

// window is how long the phase measured.
func (p *phase) window() time.Duration { return p.end.Sub(p.start) }

// closedLoop runs each caller's op back to back for d: every caller has
// exactly one request in flight. An op started at or after the end is not
// run. If an op reports the pool drained, the phase ends at that moment:
// ops started later are not counted.
func closedLoop(ctx context.Context, callers []op, d time.Duration) *phase {
	p := &phase{start: time.Now(), hist: newHist(), errKinds: map[string]int64{}}
	end := p.start.Add(d)
	var (
		mu        sync.Mutex
		drainedAt atomic.Pointer[time.Time]
		wg        sync.WaitGroup
	)
	stopped := func(t time.Time) bool {
		if at := drainedAt.Load(); at != nil && !t.Before(*at) {
			return true
		}
		return !t.Before(end)
	}
	for _, fn := range callers {
		wg.Go(func() {
			h := newHist()
			var ok, bad int64
			kinds := map[string]int64{}
			var first error
			for ctx.Err() == nil {
				t0 := time.Now()
				if stopped(t0) {
					break
				}
				err := fn(ctx)
				lat := time.Since(t0)
				if errors.Is(err, errDrained) {
					now := time.Now()
					drainedAt.CompareAndSwap(nil, &now)
					break
				}
				if ctx.Err() != nil {
					break // interrupted: not an error of the cluster's
				}
				if err != nil {
					bad++
					kinds[errKind(err)]++
					if first == nil {
						first = err
					}
					continue
				}
				ok++
				h.add(lat)
			}
			mu.Lock()
			defer mu.Unlock()
			p.ops += ok
			p.errs += bad
			p.hist.merge(h)
			for k, n := range kinds {
				p.errKinds[k] += n
			}
			if p.firstErr == nil {
				p.firstErr = first
			}
		})
	}
	wg.Wait()
	p.done = time.Now()
	p.end = end
	if at := drainedAt.Load(); at != nil && at.Before(end) {
		p.end, p.drained = *at, true
	}
	return p
}

// hooks shape a measured run.
type hooks struct {
	// afterWarmup runs between the warmup and the window, untimed: the
	// pool's top-up.
	afterWarmup func(ctx context.Context, warm *phase) error
	// during runs alongside the window (failover's kill); the window's end
	// mark waits for it.
	during func(ctx context.Context, from, to time.Time)
	// held counts its heartbeats due inside the window.
	held *heldSet
}

// measure runs the callers for the warmup, then for the window between two
// marks of the cluster's counters.
func (e *env) measure(ctx context.Context, callers []op, hk hooks) (*phase, window, error) {
	prof := e.prof
	var warm *phase
	if e.cfg.Warmup > 0 {
		e.logf("warming up for %s", e.cfg.Warmup)
		warm = closedLoop(ctx, callers, e.cfg.Warmup)
		if ctx.Err() != nil {
			return nil, window{}, ctx.Err()
		}
		if warm.errs > 0 {
			e.logf("warmup: %d errors, first: %v", warm.errs, warm.firstErr)
		}
	}
	if hk.afterWarmup != nil {
		if err := hk.afterWarmup(ctx, warm); err != nil {
			return nil, window{}, err
		}
	}
	e.logf("measuring %s: %d callers", e.cfg.Duration, len(callers))
	if err := prof.start(); err != nil {
		return nil, window{}, err
	}
	a := e.mark(ctx)
	from := time.Now()
	lp := e.startLeaderProfile(ctx, a)
	defer lp.stop() // a run that ended before the window's end
	if hk.held != nil {
		hk.held.setWindow(from, from.Add(e.cfg.Duration))
	}
	var wg sync.WaitGroup
	if hk.during != nil {
		wg.Go(func() { hk.during(ctx, from, from.Add(e.cfg.Duration)) })
	}
	p := closedLoop(ctx, callers, e.cfg.Duration)
	wg.Wait()
	if err := prof.stop(); err != nil {
		return nil, window{}, err
	}
	b := e.mark(ctx)
	if err := lp.wait(); err != nil {
		return nil, window{}, err
	}
	if ctx.Err() != nil {
		return nil, window{}, ctx.Err()
	}
	if p.errs > 0 {
		e.logf("%d errors in the window, first: %v", p.errs, p.firstErr)
	}
	if p.drained {
		e.logf("the job pool ran out %s into the window: the window ends there (give --jobs)", p.window().Round(time.Millisecond))
	}
	return p, between(a, b), nil
}

// cpuProfile is the bench's own CPU profile over a window, into a file
// Run creates before anything else, so a bad path fails the run before
// any load; nil, or the zero value (no file named), does nothing.
type cpuProfile struct {
	f       *os.File
	running bool
}

func createCPUProfile(file string) (*cpuProfile, error) {
	if file == "" {
		return &cpuProfile{}, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return &cpuProfile{f: f}, nil
}

func (p *cpuProfile) start() error {
	if p == nil || p.f == nil {
		return nil
	}
	if err := pprof.StartCPUProfile(p.f); err != nil {
		return fmt.Errorf("--cpu-profile: %w", err)
	}
	p.running = true
	return nil
}

// stop ends the profile and closes its file, reporting a failed write.
func (p *cpuProfile) stop() error {
	if p == nil || p.f == nil {
		return nil
	}
	if p.running {
		pprof.StopCPUProfile()
		p.running = false
	}
	f := p.f
	p.f = nil
	if err := f.Close(); err != nil {
		return fmt.Errorf("--cpu-profile: %w", err)
	}
	return nil
}

// checkLeaderProfile makes the leader's profile's file before anything
// else, so a bad path fails the run before any load.
func checkLeaderProfile(file string) error {
	if file == "" {
		return nil
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("--leader-profile: %w", err)
	}
	return f.Close()
}

// leaderProfile is the leader's CPU profile being read over a window; nil
// when none was asked for.
type leaderProfile struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// startLeaderProfile starts reading the CPU profile of the node leading at
// the window's start (m) for the window's whole seconds, into the file
// Config.LeaderProfile names.
func (e *env) startLeaderProfile(ctx context.Context, m mark) *leaderProfile {
	file := e.cfg.LeaderProfile
	if file == "" {
		return nil
	}
	lp := &leaderProfile{cancel: func() {}, done: make(chan struct{})}
	leader := -1
	for i, n := range m.nodes {
		if n.ok && n.metrics.leader {
			leader = i
		}
	}
	if leader < 0 {
		lp.err = errors.New("--leader-profile: no node led at the window's start")
		close(lp.done)
		return lp
	}
	secs := max(1, int(e.cfg.Duration/time.Second))
	addr := e.cfg.Endpoints[leader]
	ctx, lp.cancel = context.WithCancel(ctx)
	go func() {
		defer close(lp.done)
		if _, err := e.probe.download(ctx, addr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), file); err != nil {
			lp.err = fmt.Errorf("--leader-profile: the leader's CPU profile (the servers need --pprof, and the bench an admin token): %w", err)
			return
		}
		e.logf("the leader's (node%d) CPU profile over the window's first %d s is in %s", leader+1, secs, file)
	}()
	return lp
}

// wait waits for the profile to be written and says whether it was.
func (lp *leaderProfile) wait() error {
	if lp == nil {
		return nil
	}
	<-lp.done
	return lp.err
}

// stop gives up the profile and waits for its reader to end.
func (lp *leaderProfile) stop() {
	if lp != nil {
		lp.cancel()
		<-lp.done
	}
}
