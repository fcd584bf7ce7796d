// Package clocktest holds the fake clock.Clock that tests of the worker
// runtime (package client) and of a node's expiry table (package cluster)
// run on: a timeline the test moves by hand, so "the worker stops its jobs
// at lastAck + toleration − 2×renew" and "no lease expires before
// toleration" are facts about the fake timeline, whatever the machine's
// speed.
package clocktest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/clock"
)

// FakeClock is a clock.Clock that moves only when told. Timers fire during
// Advance, in the calling goroutine, so when Advance returns every timer
// that came due has delivered its tick (the goroutine reading it may not
// have acted yet: wait on what it does, not on time). A cluster harness
// gives each node its own, so one node's time can be paused, skewed or
// jumped while the others' goes on.
type FakeClock struct {
	mu        sync.Mutex
	now       time.Time
	timers    []*fakeTimer
	changed   chan struct{} // closed and replaced when a timer is armed, stopped or fired
	wallAhead time.Duration // ShiftWall's total
}

var _ clock.Clock = (*FakeClock)(nil)

// NewFakeClock starts at an arbitrary fixed instant.
func NewFakeClock() *FakeClock {
	return &FakeClock{now: time.Unix(1_000_000, 0), changed: make(chan struct{})}
}

// Now returns the clock's reading.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Wall is real wall time, shifted by ShiftWall: the stamps a node puts in
// commands follow the machine unless a test steps them.
func (c *FakeClock) Wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.wallAhead)
}

// ShiftWall steps the wall clock by d, as an operator's or NTP's step
// would, leaving the timeline (Now, timers) where it is: for rules that
// read the leader's wall time (retention, run-at) without waiting for it.
func (c *FakeClock) ShiftWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wallAhead += d
}

// NewTimer fires when the clock has been advanced by d; at once if d <= 0,
// as a runtime timer would.
func (c *FakeClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.notifyLocked()
	return t
}

// Advance moves the clock forward by d, fires every timer that came due,
// and returns how many fired.
func (c *FakeClock) Advance(d time.Duration) (fired int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
		fired++
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	if fired > 0 {
		c.notifyLocked()
	}
	return fired
}

// Deadlines returns when each armed timer will fire, earliest first.
func (c *FakeClock) Deadlines() []time.Time {
	deadlines, _ := c.Pending()
	return deadlines
}

// Pending returns when each armed timer will fire, earliest first, and a
// channel closed at the next change: a timer armed, stopped or fired. A
// caller that must also watch something else (a node's leadership, say)
// waits on the channel beside it and calls Pending again.
func (c *FakeClock) Pending() (deadlines []time.Time, changed <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, len(c.timers))
	for i, t := range c.timers {
		out[i] = t.at
	}
	slices.SortFunc(out, time.Time.Compare)
	return out, c.changed
}

// WaitFor waits until cond holds for the armed timers' deadlines (earliest
// first), re-checking whenever a timer is armed, stopped or fired; it
// returns ctx's error if ctx ends first. cond runs without the clock's
// lock, so it may read the clock.
func (c *FakeClock) WaitFor(ctx context.Context, cond func(deadlines []time.Time) bool) error {
	for {
		deadlines, changed := c.Pending()
		if cond(deadlines) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// BlockUntil waits until at least n timers are armed.
func (c *FakeClock) BlockUntil(ctx context.Context, n int) error {
	return c.WaitFor(ctx, func(d []time.Time) bool { return len(d) >= n })
}

// WaitForTimerAt waits until a timer is armed to fire at exactly at.
func (c *FakeClock) WaitForTimerAt(ctx context.Context, at time.Time) error {
	return c.WaitFor(ctx, func(d []time.Time) bool {
		return slices.ContainsFunc(d, at.Equal)
	})
}

func (c *FakeClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
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
	i := slices.Index(t.c.timers, t)
	if i < 0 {
		return false
	}
	t.c.timers = slices.Delete(t.c.timers, i, i+1)
	t.c.notifyLocked()
	return true
}
