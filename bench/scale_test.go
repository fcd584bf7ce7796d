package bench

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSlotTimeSpreadsWorkersOverTheRenew(t *testing.T) {
	origin := time.Unix(1000, 0)
	const workers, renew = 100000, 10 * time.Second
	if got := slotTime(origin, renew, workers, 0, 0); !got.Equal(origin) {
		t.Fatalf("first slot %v, want the origin", got)
	}
	if got, want := slotTime(origin, renew, workers, 0, 1), origin.Add(100*time.Microsecond); !got.Equal(want) {
		t.Fatalf("worker 1's slot %v, want %v", got, want)
	}
	if got, want := slotTime(origin, renew, workers, 3, workers/2), origin.Add(35*time.Second); !got.Equal(want) {
		t.Fatalf("worker W/2's fourth slot %v, want %v", got, want)
	}
	// Slots are in time order: the last worker of one round comes before
	// the first of the next.
	if last, next := slotTime(origin, renew, workers, 0, workers-1), slotTime(origin, renew, workers, 1, 0); !last.Before(next) {
		t.Fatalf("last slot of round 0 %v, first of round 1 %v", last, next)
	}
}

// Every ready worker's heartbeats are started once per renew, and exactly
// those due in the window are counted in it: the window holds two renews,
// so two per ready worker, whatever the timing of the calls.
func TestBeatLoopCountsTheWindowsSlots(t *testing.T) {
	const workers, renew = 10, 40 * time.Millisecond
	var mu sync.Mutex
	inWindow := map[int]int{}
	loop := startBeatLoop(context.Background(), workers, renew, 1000, func(_ context.Context, i int, due time.Time, in bool) {
		mu.Lock()
		defer mu.Unlock()
		if in {
			inWindow[i]++
		}
	}, func(int, time.Time, bool) { t.Error("a heartbeat held back below the bound") })
	defer loop.stop()
	for i := range workers {
		if i != 3 { // never ready: never heartbeats
			loop.setReady(i)
		}
	}
	from := time.Now().Add(100 * time.Millisecond)
	w, err := loop.setWindow(from, from.Add(2*renew))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	loop.stop()
	mu.Lock()
	defer mu.Unlock()
	for i := range workers {
		want := 2
		if i == 3 {
			want = 0
		}
		if inWindow[i] != want {
			t.Errorf("worker %d: %d heartbeats in the window, want %d", i, inWindow[i], want)
		}
	}
	if _, err := loop.setWindow(time.Now().Add(-time.Second), time.Now()); err == nil {
		t.Error("a window the loop has passed was accepted")
	}
}

func TestBeatWindowOverlaps(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	w := &beatWindow{from: at(10), to: at(20)}
	for _, tc := range []struct {
		a, b int
		want bool
	}{{0, 5, false}, {5, 11, true}, {12, 15, true}, {19, 30, true}, {20, 30, false}, {0, 10, false}} {
		if got := w.overlaps(at(tc.a), at(tc.b)); got != tc.want {
			t.Errorf("[%d, %d]: %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	var none *beatWindow
	if none.overlaps(at(0), at(100)) {
		t.Error("no window overlaps everything")
	}
}

func TestScaleFleetIDsAndGaps(t *testing.T) {
	e := &env{run: "bench-00ff", timings: timings{renew: time.Second}, cfg: &Config{}}
	s := newScaleFleet(e, nil, 3, 4)
	if got := s.workerID(2); got != "bench-00ff-w2" {
		t.Fatalf("workerID %q", got)
	}
	for _, n := range []int{0, 7, 11} {
		if got, err := s.jobNumber(s.jobID(n)); err != nil || got != n {
			t.Fatalf("jobNumber(jobID(%d)) = %d, %v", n, got, err)
		}
	}
	for _, bad := range []string{"other-scale-1", "bench-00ff-scale-12", "bench-00ff-scale-x", "bench-00ff-scale--1"} {
		if _, err := s.jobNumber(bad); err == nil {
			t.Errorf("jobNumber(%q) accepted", bad)
		}
	}
	s.jobs[4], s.tokens[4], s.jobs[7], s.tokens[7] = 9, 90, 2, 20
	refs := s.refs(1)
	if len(refs) != 4 || refs[0].GetJobId() != "bench-00ff-scale-9" || refs[0].GetToken() != 90 || refs[3].GetToken() != 20 {
		t.Fatalf("worker 1's refs %v", refs)
	}

	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	w := &beatWindow{from: at(1000), to: at(5000)}
	s.window.Store(w)
	s.acked(0, at(100))
	s.acked(0, at(900)) // before the window: its gap does not count
	s.acked(0, at(2100))
	s.acked(0, at(1500)) // answered after a later one: ignored
	s.acked(0, at(3000))
	s.acked(0, at(4200))
	s.acked(1, at(4000))
	if got := s.closeGaps(w); got != 1200*time.Millisecond {
		t.Fatalf("longest gap %v, want 1.2s (worker 0, 900 ms to 2,100 ms)", got)
	}
	s.acked(2, at(1200)) // silent from here to the window's end
	if got := s.closeGaps(w); got != 3800*time.Millisecond {
		t.Fatalf("longest gap %v, want 3.8s (worker 2, to the window's end)", got)
	}
}

func TestParseGauges(t *testing.T) {
	text := `# HELP leasehold_snapshot_last_seconds Time.
# TYPE leasehold_snapshot_last_seconds gauge
leasehold_snapshot_last_seconds 1.25e-02
leasehold_snapshot_last_bytes 123456
leasehold_jobs{state="queued"} 5
leasehold_live_leases 0
`
	g, err := parseGauges(strings.NewReader(text), "leasehold_snapshot_last_seconds", "leasehold_snapshot_last_bytes",
		"leasehold_live_leases", "leasehold_absent")
	if err != nil {
		t.Fatal(err)
	}
	if g["leasehold_snapshot_last_seconds"] != 0.0125 || g["leasehold_snapshot_last_bytes"] != 123456 || len(g) != 3 {
		t.Fatalf("%v", g)
	}
	if _, ok := g["leasehold_live_leases"]; !ok {
		t.Fatal("a zero sample is missing")
	}
	if _, err := parseGauges(strings.NewReader("leasehold_live_leases x\n"), "leasehold_live_leases"); err == nil {
		t.Fatal("a bad value was accepted")
	}
}

func TestParseMemStats(t *testing.T) {
	text := `heap profile: 3: 4096 [10: 8192] @ heap/1048576
1: 4096 [1: 4096] @ 0x1 0x2
#	0x1	main.f+0x1	/x.go:1

# runtime.MemStats
# Alloc = 1000
# TotalAlloc = 5000
# HeapAlloc = 1000
# HeapSys = 8000
# HeapInuse = 2048
# HeapObjects = 7
`
	h, err := parseMemStats(strings.NewReader(text))
	if err != nil || h.inuse != 2048 || h.alloc != 1000 {
		t.Fatalf("%+v, %v", h, err)
	}
	if _, err := parseMemStats(strings.NewReader("heap profile: 0: 0 [0: 0] @ heap/1\n")); err == nil {
		t.Fatal("a profile without MemStats was accepted")
	}
}

func TestParseRSS(t *testing.T) {
	text := "Name:\tleasehold\nVmPeak:\t  900 kB\nVmRSS:\t  123456 kB\nThreads:\t12\n"
	if got, err := parseRSS(strings.NewReader(text)); err != nil || got != 123456<<10 {
		t.Fatalf("%d, %v", got, err)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tx kB\n"} {
		if _, err := parseRSS(strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestPerLease(t *testing.T) {
	if got := perLease(3000, 1000, 4); got != 500 {
		t.Fatalf("%v", got)
	}
	if got := perLease(3000, 1000, 0); got == got { // NaN
		t.Fatalf("no leases: %v, want NaN", got)
	}
}

// Past the bound on heartbeats in flight, a due heartbeat is not sent but
// counted: here the first two never return, so every one due in the window
// is held back.
func TestBeatLoopBoundsHeartbeatsInFlight(t *testing.T) {
	const workers, renew = 5, 40 * time.Millisecond
	unsent := make(chan bool, 100)
	loop := startBeatLoop(context.Background(), workers, renew, 2, func(ctx context.Context, _ int, _ time.Time, _ bool) {
		<-ctx.Done() // answered only when the loop stops
	}, func(_ int, _ time.Time, in bool) { unsent <- in })
	defer loop.stop()
	for i := range workers {
		loop.setReady(i)
	}
	from := time.Now().Add(100 * time.Millisecond)
	if _, err := loop.setWindow(from, from.Add(renew)); err != nil {
		t.Fatal(err)
	}
	for in := 0; in < workers; {
		if <-unsent {
			in++
		}
	}
	loop.stop()
	if n := loop.inFlight.Load(); n != 0 {
		t.Fatalf("%d heartbeats in flight after stop", n)
	}
}
