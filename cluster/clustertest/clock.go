package clustertest

import (
	"sync"
	"time"

	"github.com/leasehold/leasehold/cluster"
)

// FakeClock is a cluster.Clock that moves only when told. Each node of a
// harness has its own, so one node's time can be paused, skewed or jumped
// while the others' goes on.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	armed  chan struct{} // closed and replaced whenever a timer is created
}

// NewFakeClock starts at an arbitrary fixed instant.
func NewFakeClock() *FakeClock {
	return &FakeClock{now: time.Unix(1_000_000, 0), armed: make(chan struct{})}
}

var _ cluster.Clock = (*FakeClock)(nil)

// Now returns the clock's current reading.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Wall is real wall time: stamps in commands are not what tests control.
func (c *FakeClock) Wall() time.Time { return time.Now() }

// NewTimer fires when the clock has been advanced by d.
func (c *FakeClock) NewTimer(d time.Duration) cluster.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	close(c.armed)
	c.armed = make(chan struct{})
	return t
}

// Advance moves the clock forward, fires every timer that came due, and
// returns how many fired with a channel that is closed when the next timer
// is created (a loop that re-arms after its work has done the work).
func (c *FakeClock) Advance(d time.Duration) (fired int, rearmed <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- c.now
			fired++
			continue
		}
		kept = append(kept, t)
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	return fired, c.armed
}

type fakeTimer struct {
	c  *FakeClock
	at time.Time
	ch chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Pending returns the number of timers waiting, and a channel closed when
// the next timer is created.
func (c *FakeClock) Pending() (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers), c.armed
}
