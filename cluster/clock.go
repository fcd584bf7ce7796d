package cluster

import (
	"time"

	"github.com/leasehold/leasehold/clock"
)

// Clock is the time the expiry table runs on, and the wall clock stamped
// into commands. The production clock counts while the machine is
// suspended (CLOCK_BOOTTIME on Linux), so a leader that slept sees the gap
// and applies the absence rule; tests inject clocktest.FakeClock to pause,
// skew and advance one node's time.
type Clock interface {
	clock.Clock
	// Wall is the wall-clock time stamped into commands.
	Wall() time.Time
}

// Timer is clock.Timer, named here for implementations of Clock.
type Timer = clock.Timer

// SystemClock reads clock.System for deadlines (CLOCK_BOOTTIME on Linux,
// Go's monotonic clock elsewhere) and the system clock for stamps.
func SystemClock() Clock { return systemClock{boot: clock.System()} }

type systemClock struct{ boot clock.Clock }

func (s systemClock) Now() time.Time { return s.boot.Now() }

func (systemClock) Wall() time.Time { return time.Now() }

// NewTimer uses a runtime timer (monotonic), not the boot clock's. After a
// suspend it may fire late; the expiry loop compares Now() readings, so
// lateness never makes a deadline pass early.
func (systemClock) NewTimer(d time.Duration) Timer { return clock.RuntimeTimer(d) }
