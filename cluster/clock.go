package cluster

import (
	"time"

	"golang.org/x/sys/unix"
)

// Clock is the time the expiry table runs on. The production clock counts
// while the machine is suspended (CLOCK_BOOTTIME), so a leader that slept
// sees the gap and applies the absence rule; tests inject a fake clock to
// pause, skew and advance one node's time.
type Clock interface {
	// Now is a reading for deadlines: only differences between readings of
	// one clock mean anything.
	Now() time.Time
	// NewTimer fires once after d of this clock's time.
	NewTimer(d time.Duration) Timer
	// Wall is the wall-clock time stamped into commands.
	Wall() time.Time
}

// Timer is the part of *time.Timer the node uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// SystemClock reads CLOCK_BOOTTIME for deadlines and the system clock for
// stamps.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Now() // not Linux-like: the monotonic clock is the best there is
	}
	return time.Unix(0, ts.Nano())
}

func (systemClock) Wall() time.Time { return time.Now() }

// NewTimer uses a runtime timer (monotonic). After a suspend it may fire
// late; the expiry loop compares Now() readings, so lateness never makes a
// deadline pass early.
func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time { return s.t.C }
func (s sysTimer) Stop() bool          { return s.t.Stop() }
