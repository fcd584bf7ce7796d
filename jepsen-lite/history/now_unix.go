//go:build unix

package history

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Now returns CLOCK_MONOTONIC in nanoseconds. Every process of a run on one
// machine reads the same clock, so their entries compare; Go's own
// monotonic reading is an offset from each process's start and would not.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// Linux always has CLOCK_MONOTONIC; failing here would mean a
		// history whose times cannot be trusted, which no run survives.
		panic(fmt.Sprintf("history: clock_gettime(CLOCK_MONOTONIC): %v", err))
	}
	return ts.Nano()
}
