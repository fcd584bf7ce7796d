//go:build linux

package clock

import (
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

func (systemClock) Now() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Now()
	}
	return time.Unix(0, ts.Nano())
}

// NewTimer arms a CLOCK_BOOTTIME timerfd. The fd is non-blocking, so the
// os.File reading it parks in Go's netpoller rather than a thread, and Stop
// closing it wakes that read. If the kernel refuses the timerfd (a seccomp
// profile, say) a runtime timer stands in.
func (systemClock) NewTimer(d time.Duration) Timer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return RuntimeTimer(d)
	}
	// A zero it_value disarms a timerfd; the shortest real wait is 1ns.
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(max(d.Nanoseconds(), 1))}
	if err := unix.TimerfdSettime(fd, 0, &spec, nil); err != nil {
		unix.Close(fd)
		return RuntimeTimer(d)
	}
	t := &bootTimer{f: os.NewFile(uintptr(fd), "leasehold-boottime-timer"), c: make(chan time.Time, 1)}
	go t.wait()
	return t
}

// bootTimer states: exactly one of wait (on firing) and Stop moves it out
// of armed, and whichever does closes the file.
const (
	timerArmed int32 = iota
	timerFired
	timerStopped
)

type bootTimer struct {
	f     *os.File
	c     chan time.Time
	state atomic.Int32
}

func (t *bootTimer) wait() {
	var buf [8]byte // the number of expirations
	// A read error other than Stop's close fires the timer early, which is
	// safe: a deadline's owner compares Now() with it when its timer fires.
	_, _ = t.f.Read(buf[:])
	if !t.state.CompareAndSwap(timerArmed, timerFired) {
		return // stopped: Stop closed the file
	}
	t.f.Close()
	t.c <- systemClock{}.Now()
}

func (t *bootTimer) C() <-chan time.Time { return t.c }

func (t *bootTimer) Stop() bool {
	if !t.state.CompareAndSwap(timerArmed, timerStopped) {
		return false
	}
	t.f.Close()
	return true
}
