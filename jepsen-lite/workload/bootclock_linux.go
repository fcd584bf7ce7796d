package workload

import "golang.org/x/sys/unix"

// bootAhead is how far CLOCK_BOOTTIME (the workers' clock) is ahead of
// CLOCK_MONOTONIC (the history's), in nanoseconds: the time the machine
// spent suspended, a constant on one that does not suspend.
func bootAhead() (int64, bool) {
	var boot, mono unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil || unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) != nil {
		return 0, false
	}
	return boot.Nano() - mono.Nano(), true
}
