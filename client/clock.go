package client

import "time"

// Clock is the time the worker runtime measures heartbeats and its
// self-stop deadline on. The default, SystemClock, keeps counting while the
// machine is suspended; tests inject a fake one (clienttest.FakeClock).
type Clock interface {
	// Now is a reading for deadlines: only differences between readings of
	// one clock mean anything.
	Now() time.Time
	// NewTimer fires once after d of this clock's time; d <= 0 fires at
	// once.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the runtime uses.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; false if it already fired or
	// was stopped.
	Stop() bool
}

// SystemClock is the production clock. On Linux it reads CLOCK_BOOTTIME and
// its timers are CLOCK_BOOTTIME timerfds, so a machine that slept past a
// worker's self-stop deadline stops the worker's jobs the moment it wakes:
// Go's own clock and timers are CLOCK_MONOTONIC, which stops during
// suspend, and would let a job run on after its lease expired. Elsewhere it
// falls back to Go's monotonic clock.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

// runtimeTimer is a Go timer behind the Timer interface.
type runtimeTimer struct{ t *time.Timer }

func (r runtimeTimer) C() <-chan time.Time { return r.t.C }
func (r runtimeTimer) Stop() bool          { return r.t.Stop() }
