//go:build chaos

package main

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/cluster"
)

// serverClock, in a chaos build only, is the system clock bent by a control
// file named by LEASEHOLD_CHAOS_CLOCK: "OFFSET_SECONDS RATE" (e.g. "2.5 1.0"
// jumps 2.5 s ahead, "0 1.05" runs 5% fast). jepsen-lite writes the file to
// inject clock faults into one node. Without the variable it is the system
// clock. The file is re-read at most every 50 ms; a rate change keeps time
// continuous (it bends from the moment it is seen).
func serverClock() cluster.Clock {
	path := os.Getenv("LEASEHOLD_CHAOS_CLOCK")
	if path == "" {
		return cluster.SystemClock()
	}
	return &skewClock{base: cluster.SystemClock(), path: path, rate: 1}
}

type skewClock struct {
	base cluster.Clock
	path string

	mu       sync.Mutex
	read     time.Time     // when the file was last read (real)
	anchor   time.Time     // real reading where the current rate began
	anchored time.Duration // skewed offset accumulated at anchor
	offset   time.Duration // the file's offset
	rate     float64
	timers   map[*skewTimer]time.Time // pending timers and when (real) each is due
}

func (c *skewClock) refresh(real time.Time) {
	if real.Sub(c.read) < 50*time.Millisecond {
		return
	}
	c.read = real
	b, err := os.ReadFile(c.path)
	if err != nil {
		return
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return
	}
	off, err1 := strconv.ParseFloat(f[0], 64)
	rate, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil || rate <= 0 {
		return
	}
	if rate != c.rate {
		c.anchored = c.skew(real)
		c.anchor, c.rate = real, rate
	}
	next := time.Duration(off * float64(time.Second))
	if jump := next - c.offset; jump > 0 {
		// A jump ahead is time this process did not see pass, as after a
		// suspend: every timer due within it fires now, as a resumed
		// process's overdue timers do.
		for t, due := range c.timers {
			if due.Sub(real) <= jump {
				t.fireNow()
				delete(c.timers, t)
			}
		}
	}
	c.offset = next
}

// skew is how far the bent clock is from the real one at real, from the
// rate alone.
func (c *skewClock) skew(real time.Time) time.Duration {
	if c.anchor.IsZero() {
		return 0
	}
	elapsed := real.Sub(c.anchor)
	return c.anchored + time.Duration(float64(elapsed)*(c.rate-1))
}

func (c *skewClock) Now() time.Time {
	real := c.base.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refresh(real)
	return real.Add(c.skew(real) + c.offset)
}

func (c *skewClock) Wall() time.Time {
	real := c.base.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refresh(real)
	return c.base.Wall().Add(c.skew(real) + c.offset)
}

// NewTimer scales the wait by the rate: a fast clock's timers fire early.
// A jump ahead fires the timers due within it (see refresh).
func (c *skewClock) NewTimer(d time.Duration) cluster.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	wait := time.Duration(float64(d) / c.rate)
	t := &skewTimer{base: c.base.NewTimer(wait), c: make(chan time.Time, 1), jumped: make(chan struct{}), stopped: make(chan struct{})}
	if c.timers == nil {
		c.timers = map[*skewTimer]time.Time{}
	}
	c.timers[t] = c.base.Now().Add(wait)
	go func() {
		defer func() {
			c.mu.Lock()
			delete(c.timers, t)
			c.mu.Unlock()
		}()
		select {
		case v := <-t.base.C():
			t.c <- v
		case <-t.jumped:
			t.base.Stop()
			t.c <- c.base.Now()
		case <-t.stopped:
		}
	}()
	return t
}

// skewTimer is a timer that a jump of its clock can fire early.
type skewTimer struct {
	base    cluster.Timer
	c       chan time.Time
	jumped  chan struct{}
	stopped chan struct{}
	once    sync.Once
}

func (t *skewTimer) C() <-chan time.Time { return t.c }

func (t *skewTimer) fireNow() { t.once.Do(func() { close(t.jumped) }) }

func (t *skewTimer) Stop() bool {
	stopped := false
	t.once.Do(func() {
		stopped = t.base.Stop()
		close(t.stopped)
	})
	return stopped
}
