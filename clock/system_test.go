package clock_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
)

// The system clock's timers fire, no earlier than asked on its own clock,
// and Stop ends them (goleak checks their goroutines are gone).
func TestSystemTimers(t *testing.T) {
	c := clock.System()
	before := c.Now()
	tm := c.NewTimer(time.Millisecond)
	at := <-tm.C() // a timer that never fires ends in the test binary's timeout
	if at.Before(before.Add(time.Millisecond)) {
		t.Fatalf("fired %v after it was armed, asked for 1ms", at.Sub(before))
	}
	if tm.Stop() {
		t.Fatal("Stop after firing returned true")
	}
	if now := c.Now(); now.Before(at) {
		t.Fatalf("clock went backwards: %v then %v", at, now)
	}

	long := c.NewTimer(time.Hour)
	if !long.Stop() {
		t.Fatal("Stop of an armed timer returned false")
	}
	if long.Stop() {
		t.Fatal("second Stop returned true")
	}
	<-c.NewTimer(0).C()
	<-c.NewTimer(-time.Second).C()
}
