//go:build unix

package proccpu

import (
	"syscall"
	"time"
)

// Self is this process's user and system CPU time, every thread's
// (getrusage); 0 when it cannot be read.
func Self() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
