package clock

import "time"

// Clock is a time that deadlines are measured on.
type Clock interface {
	// Now is a reading for deadlines: only differences between readings of
	// one clock mean anything.
	Now() time.Time
	// NewTimer fires once after d of this clock's time; d <= 0 fires at
	// once, as a runtime timer does.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer a deadline needs.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; false if it already fired or
	// was stopped.
	Stop() bool
}

// System is the production clock. On Linux it reads CLOCK_BOOTTIME and its
// timers are CLOCK_BOOTTIME timerfds, so a machine that slept past a
// deadline sees it passed the moment it wakes: Go's own clock and timers
// are CLOCK_MONOTONIC, which stops during suspend. Elsewhere it falls back
// to Go's monotonic clock, which may not count a suspend.
func System() Clock { return systemClock{} }

type systemClock struct{}

// RuntimeTimer is a Go runtime timer (CLOCK_MONOTONIC) behind the Timer
// interface.
func RuntimeTimer(d time.Duration) Timer { return runtimeTimer{time.NewTimer(d)} }

type runtimeTimer struct{ t *time.Timer }

func (r runtimeTimer) C() <-chan time.Time { return r.t.C }
func (r runtimeTimer) Stop() bool          { return r.t.Stop() }
