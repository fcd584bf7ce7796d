//go:build !linux

package clock

import "time"

// Without CLOCK_BOOTTIME, Go's monotonic clock is the best there is; it may
// not count a suspend.
func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return RuntimeTimer(d) }
