package clocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock/clocktest"
)

func TestFakeClock(t *testing.T) {
	c := clocktest.NewFakeClock()
	start := c.Now()
	a := c.NewTimer(10 * time.Second)
	b := c.NewTimer(20 * time.Second)
	stopped := c.NewTimer(15 * time.Second)
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop: want true, then false")
	}
	if d := c.Deadlines(); len(d) != 2 || !d[0].Equal(start.Add(10*time.Second)) || !d[1].Equal(start.Add(20*time.Second)) {
		t.Fatalf("Deadlines %v", d)
	}

	if n := c.Advance(10*time.Second - time.Nanosecond); n != 0 {
		t.Fatalf("%d fired before any was due", n)
	}
	if n := c.Advance(time.Nanosecond); n != 1 {
		t.Fatalf("%d fired at the first deadline, want 1", n)
	}
	if at := <-a.C(); !at.Equal(start.Add(10 * time.Second)) {
		t.Fatalf("a fired at %v", at.Sub(start))
	}
	if a.Stop() {
		t.Fatal("Stop after firing returned true")
	}
	if n := c.Advance(time.Hour); n != 1 {
		t.Fatalf("%d fired, want b only", n)
	}
	<-b.C()
	if ready(stopped.C()) {
		t.Fatal("a stopped timer fired")
	}
	if !c.Now().Equal(start.Add(time.Hour + 10*time.Second)) {
		t.Fatalf("now %v after advancing 1h10s", c.Now().Sub(start))
	}
}

// A timer of zero or less fires at once, as a runtime timer does: it is
// never armed, so Stop finds nothing to stop and Advance nothing to fire.
func TestFakeClockFiresNonPositiveAtOnce(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		c := clocktest.NewFakeClock()
		tm := c.NewTimer(d)
		select {
		case at := <-tm.C():
			if !at.Equal(c.Now()) {
				t.Fatalf("NewTimer(%v) fired at %v, want now %v", d, at, c.Now())
			}
		default:
			t.Fatalf("NewTimer(%v) did not fire at once", d)
		}
		if tm.Stop() {
			t.Fatalf("Stop of a fired NewTimer(%v) returned true", d)
		}
		if n := len(c.Deadlines()); n != 0 {
			t.Fatalf("NewTimer(%v) left %d timers armed", d, n)
		}
		if n := c.Advance(time.Hour); n != 0 {
			t.Fatalf("NewTimer(%v) fired again in Advance", d)
		}
	}
}

// A loop that stops its timer and arms another (the way a timer is reset
// through this interface) is timed from the new timer's creation, and the
// stopped one never fires.
func TestFakeClockStopAndRearm(t *testing.T) {
	c := clocktest.NewFakeClock()
	first := c.NewTimer(10 * time.Second)
	c.Advance(5 * time.Second)
	if !first.Stop() {
		t.Fatal("Stop of an armed timer returned false")
	}
	second := c.NewTimer(10 * time.Second)
	if n := c.Advance(5 * time.Second); n != 0 {
		t.Fatalf("%d fired at the stopped timer's deadline", n)
	}
	if n := c.Advance(5 * time.Second); n != 1 {
		t.Fatalf("%d fired at the new timer's deadline, want 1", n)
	}
	<-second.C()
	if ready(first.C()) {
		t.Fatal("the stopped timer fired")
	}

	// Timers due at one instant all fire in one Advance, however far past.
	x, y := c.NewTimer(time.Second), c.NewTimer(time.Second)
	if n := c.Advance(time.Minute); n != 2 {
		t.Fatalf("%d fired, want both", n)
	}
	<-x.C()
	<-y.C()
}

// Pending's channel closes at the next arming, stop or firing, and at
// nothing else (an Advance that fires nothing is no change).
func TestFakeClockPendingChanges(t *testing.T) {
	c := clocktest.NewFakeClock()
	_, changed := c.Pending()
	tm := c.NewTimer(time.Second)
	if !ready(changed) {
		t.Fatal("arming a timer did not close the channel")
	}
	d, changed := c.Pending()
	if len(d) != 1 {
		t.Fatalf("%d pending, want 1", len(d))
	}
	c.Advance(time.Millisecond)
	c.NewTimer(0) // fires at once: never armed
	if ready(changed) {
		t.Fatal("the channel closed without a timer armed, stopped or fired")
	}
	tm.Stop()
	if !ready(changed) {
		t.Fatal("stopping a timer did not close the channel")
	}
	c.NewTimer(time.Second)
	_, changed = c.Pending()
	c.Advance(time.Second)
	if !ready(changed) {
		t.Fatal("firing a timer did not close the channel")
	}
	if d, _ := c.Pending(); len(d) != 0 {
		t.Fatalf("%d pending after every timer fired", len(d))
	}
}

func TestFakeClockWaitFor(t *testing.T) {
	c := clocktest.NewFakeClock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := c.Now().Add(time.Minute)
	done := make(chan error, 1)
	go func() { done <- c.WaitForTimerAt(ctx, want) }()
	c.NewTimer(time.Second)
	c.NewTimer(time.Minute)
	if err := <-done; err != nil {
		t.Fatalf("WaitForTimerAt: %v", err)
	}
	if err := c.BlockUntil(ctx, 2); err != nil {
		t.Fatalf("BlockUntil: %v", err)
	}
	// The condition may read the clock (it runs without the clock's lock).
	if err := c.WaitFor(ctx, func(d []time.Time) bool { return d[0].Sub(c.Now()) == time.Second }); err != nil {
		t.Fatalf("WaitFor reading the clock: %v", err)
	}
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	if err := c.BlockUntil(short, 3); err == nil {
		t.Fatal("BlockUntil with an ended context returned nil")
	}
}

// ready reports whether ch can be received from now.
func ready[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
