//go:build !linux

package workload

// bootAhead: off Linux the workers' clock is Go's monotonic clock, which
// jepsen-lite (Linux only) never compares with the history's.
func bootAhead() (int64, bool) { return 0, false }
