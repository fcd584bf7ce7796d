package cluster

import (
	"slices"
	"testing"
	"time"
)

// tickUntil ticks every 250 ms (well inside grace, so no absence) up to
// and including end, and returns the result of the tick at end.
func tickUntil(tab *expiryTable, end time.Time) tickResult {
	tab.mu.Lock()
	next := tab.lastTick.Add(250 * time.Millisecond)
	tab.mu.Unlock()
	for ; next.Before(end); next = next.Add(250 * time.Millisecond) {
		tab.tick(next)
	}
	return tab.tick(end)
}

func TestExpiryTableRules(t *testing.T) {
	const grace, toleration = time.Second, 3 * time.Second
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tab := newExpiryTable(grace, toleration, t0, []string{"held"})

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
	if tab.markExpiring("fresh", []uint64{7}, at(4700*time.Millisecond)) {
		t.Fatal("expiry decided for a worker heard after the tick")
	}
	if !tab.markExpiring("held", []uint64{9}, at(4700*time.Millisecond)) {
		t.Fatal("expiry of an overdue worker refused")
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
	tab := newExpiryTable(grace, toleration, t0, []string{"a", "b"})
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
