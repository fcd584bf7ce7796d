package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// tickUntil ticks every 250 ms (well inside grace, so no absence) up to
// and including end, and returns what those ticks reported, together: a
// worker is reported when it crosses a threshold, and again at rechecks.
func tickUntil(tab *expiryTable, end time.Time) tickResult {
	tab.mu.Lock()
	next := tab.lastTick.Add(250 * time.Millisecond)
	tab.mu.Unlock()
	var all tickResult
	add := func(r tickResult) {
		all.gap = max(all.gap, r.gap)
		all.unreachable = union(all.unreachable, r.unreachable)
		all.reachable = union(all.reachable, r.reachable)
		all.overdue = union(all.overdue, r.overdue)
		all.idle = union(all.idle, r.idle)
	}
	for ; next.Before(end); next = next.Add(250 * time.Millisecond) {
		add(tab.tick(next))
	}
	add(tab.tick(end))
	return all
}

func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

func TestExpiryTableRules(t *testing.T) {
	const grace, toleration = time.Second, 3 * time.Second
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tab := newExpiryTable(expiryTimings{grace, toleration, time.Hour}, t0, []string{"held"}, nil)

	// Takeover starts the clock now: silent workers are not charged for
	// what came before.
	if r := tab.tick(at(500 * time.Millisecond)); len(r.overdue)+len(r.unreachable) != 0 || r.gap != 0 {
		t.Fatalf("just after takeover: %+v", r)
	}
	tab.heard("fresh", at(500*time.Millisecond))
	if !tab.reachable("never-heard", at(time.Hour), at(time.Hour)) {
		t.Fatal("a worker whose request just arrived is unreachable")
	}
	if tab.reachable("never-heard", at(0), at(2*grace)) {
		t.Fatal("a parked request's worker, silent past grace since, is reachable")
	}

	// Past grace: unreachable once; heard again: reachable once.
	r := tab.tick(at(1200 * time.Millisecond))
	if !slices.Equal(r.unreachable, []string{"held"}) {
		t.Fatalf("unreachable %v", r.unreachable)
	}
	if r := tab.tick(at(1300 * time.Millisecond)); len(r.unreachable) != 0 {
		t.Fatal("unreachable announced twice")
	}
	tab.heard("held", at(1400*time.Millisecond))
	if r := tab.tick(at(1500 * time.Millisecond)); !slices.Equal(r.reachable, []string{"held"}) {
		t.Fatalf("reachable %v", r.reachable)
	}

	// Past toleration: overdue; the expiry is decided only if still
	// overdue under the lock, and from then heartbeats answer it lost.
	r = tickUntil(tab, at(4600*time.Millisecond))
	if !slices.Equal(r.overdue, []string{"fresh", "held"}) {
		t.Fatalf("overdue %v", r.overdue)
	}
	tab.heard("fresh", at(4650*time.Millisecond))
	if _, ok := tab.markExpiring("fresh", []uint64{7}, at(4700*time.Millisecond)); ok {
		t.Fatal("expiry decided for a worker heard after the tick")
	}
	if late, ok := tab.markExpiring("held", []uint64{9}, at(4700*time.Millisecond)); !ok || late <= 0 || late > 4700*time.Millisecond {
		t.Fatalf("expiry of an overdue worker: decided %v, %v late", ok, late)
	}
	if exp := tab.heard("held", at(4800*time.Millisecond)); !exp[9] {
		t.Fatal("a heartbeat after the decision was not told the lease is expiring")
	}
	// The worker was heard again, but the decision stands until the expiry
	// commits (the loop re-proposes whatever decided() lists).
	if d := tab.decided(); !slices.Equal(d["held"], []uint64{9}) {
		t.Fatalf("decided %v", d)
	}
	tab.expired("held", []uint64{9})
	if exp := tab.heard("held", at(4900*time.Millisecond)); len(exp) != 0 || len(tab.decided()) != 0 {
		t.Fatalf("expired tokens still marked: %v", exp)
	}
}

func TestExpiryTableAbsenceShift(t *testing.T) {
	const grace, toleration = time.Second, 3 * time.Second
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tab := newExpiryTable(expiryTimings{grace, toleration, time.Hour}, t0, []string{"a", "b"}, nil)
	tickUntil(tab, at(2*time.Second)) // regular ticks: deadlines keep
	// A worker handled after the pause ended, before the loop's tick:
	tab.heard("b", at(10*time.Second))
	r := tab.tick(at(10 * time.Second)) // the loop was away for 8 s
	if r.gap != 8*time.Second {
		t.Fatalf("gap %v, want 8s", r.gap)
	}
	if len(r.overdue) != 0 {
		t.Fatalf("overdue after an absence: %v", r.overdue)
	}
	// a was silent 2 s before the pause: that still counts; b's clock is
	// now, not now + gap.
	r = tickUntil(tab, at(10*time.Second+1500*time.Millisecond))
	if !slices.Equal(r.overdue, []string{"a"}) {
		t.Fatalf("overdue %v, want [a]", r.overdue)
	}
	r = tickUntil(tab, at(10*time.Second+3100*time.Millisecond))
	if !slices.Equal(r.overdue, []string{"a", "b"}) {
		t.Fatalf("overdue %v, want [a b]", r.overdue)
	}
}

// Every registered worker is timed for removal. One the leader has not
// heard since takeover and that holds nothing is not announced (the leader
// did not see it fall silent) and not counted as timed; past removeAfter
// it is idle, like any worker, unless heard in between.
func TestExpiryTableIdleWorkers(t *testing.T) {
	const grace, toleration, removeAfter = time.Second, 3 * time.Second, 10 * time.Second
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tab := newExpiryTable(expiryTimings{grace, toleration, removeAfter}, t0, []string{"held"}, []string{"quiet", "talker"})
	if tab.size() != 1 {
		t.Fatalf("timed %d, want the holder only", tab.size())
	}
	if r := tickUntil(tab, at(1250*time.Millisecond)); !slices.Equal(r.unreachable, []string{"held"}) {
		t.Fatalf("unreachable %v, want the holder only", r.unreachable)
	}
	if r := tickUntil(tab, at(5*time.Second)); !slices.Equal(r.overdue, []string{"held"}) {
		t.Fatalf("overdue %v, want the holder only", r.overdue)
	}
	tab.heard("talker", at(6*time.Second))
	if r := tickUntil(tab, at(6*time.Second+250*time.Millisecond)); len(r.reachable) != 0 || tab.size() != 2 {
		t.Fatalf("a quiet worker heard: reachable %v, timed %d", r.reachable, tab.size())
	}
	r := tickUntil(tab, at(10*time.Second+500*time.Millisecond))
	if !slices.Equal(r.idle, []string{"held", "quiet"}) {
		t.Fatalf("idle %v, want [held quiet]", r.idle)
	}
	if !tab.stillIdle("quiet", at(10*time.Second+500*time.Millisecond)) {
		t.Fatal("an idle worker is not still idle")
	}
	tab.heard("quiet", at(10*time.Second+600*time.Millisecond))
	if tab.stillIdle("quiet", at(10*time.Second+700*time.Millisecond)) {
		t.Fatal("a worker heard after the tick is still idle")
	}
	tab.removed([]string{"held"})
	if r := tab.tick(at(10*time.Second + 750*time.Millisecond)); slices.Contains(r.idle, "held") || tab.size() != 2 {
		t.Fatalf("a removed worker is still timed: %+v, %d", r, tab.size())
	}
	// A worker the state no longer knows is forgotten past toleration.
	tab.forget("talker", at(10*time.Second+750*time.Millisecond))
	if tab.size() != 1 {
		t.Fatalf("timed %d after forgetting a deregistered worker", tab.size())
	}
}

// A tick looks at the workers whose check is due, not at all of them:
// workers heard on schedule cost a look once per grace, not per tick.
func TestExpiryTickWorkGrowsWithWhatIsDue(t *testing.T) {
	const grace, toleration, renew = 5 * time.Second, 15 * time.Second, time.Second
	const n = 10000
	t0 := time.Unix(1000, 0)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%05d", i)
	}
	tab := newExpiryTable(expiryTimings{grace, toleration, time.Hour}, t0, ids, nil)
	looked := 0
	// Every worker heard every renew for a minute, a tick every half renew.
	for now := t0; now.Before(t0.Add(time.Minute)); now = now.Add(renew / 2) {
		if now.Sub(t0)%renew == 0 {
			for _, id := range ids {
				tab.heard(id, now)
			}
		}
		r := tab.tick(now)
		looked += r.looked
		if len(r.unreachable)+len(r.overdue) != 0 {
			t.Fatalf("workers heard on schedule reported: %+v", r)
		}
	}
	// 120 ticks; a full scan per tick would be 1,200,000 looks. A look per
	// worker per grace is 12 per worker a minute.
	if per := looked / n; per > 13 {
		t.Fatalf("%d looks per worker in a minute of ticks, want about one per grace", per)
	}
}
