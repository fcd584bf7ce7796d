package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// leaderCheck batches quorum checks of leadership. Every caller that
// arrives while no check is running starts one; callers that arrive while
// one runs wait for the next, because a check that started before their
// request arrived proves nothing about the moment after it. So one
// VerifyLeader round trip serves every heartbeat and linearizable read
// waiting at that moment.
//
// Under load the checks run back to back, each a round of RPCs to every
// follower: at ten thousand heartbeats a second that was thousands of
// rounds a second, a quarter of a core spent on the followers alone. So
// once a batch is large (checkCoalesce callers or more), the next check
// starts no sooner than checkGap after the previous one started, and
// gathers everyone who arrives meanwhile. A caller alone, or a trickle of
// them, does not wait for the gap (unless it comes just after a large
// batch): one check each, at once. Waiting longer
// before a check proves no less: it still starts after every caller in
// its batch arrived.
type leaderCheck struct {
	verify func() error
	now    func() time.Time    // time.Now; a test's fake
	sleep  func(time.Duration) // time.Sleep; a test's fake
	// waited observes each caller's wait, in seconds; nil: not observed.
	waited prometheus.Observer

	mu      sync.Mutex
	waiting []chan error
	running bool
}

// checkGap bounds the checks to four thousand a second under load: a
// follower answers each in tens of microseconds. A heartbeat that
// arrives just after a check starts waits for the gap and then the
// check, so with workers beating back to back the gap sets the pace. It
// was 2 ms, then 1 ms (1.26x the beats a second). Against 1 ms, 250 µs
// measured 1.33x the beats a second of 64 workers with a stream each and
// 2.40x of 16, at no more of the servers' CPU a beat; no gap at all
// measured no better than 250 µs, with more allocations a beat
// (docs/performance-history.md, "Leadership checks a quarter of a
// millisecond apart").
const (
	checkCoalesce = 8
	checkGap      = 250 * time.Microsecond
)

// newLeaderCheck checks through r until stop is closed (the node's
// stop): a check Raft never answers (one still queued when it shuts down)
// then ends with ErrShutdown rather than holding the check's goroutine.
func newLeaderCheck(r *raft.Raft, stop <-chan struct{}) *leaderCheck {
	verify := func() error {
		if err, resolved := futureError(r.VerifyLeader(), stop, nil); resolved {
			return err
		}
		return ErrShutdown
	}
	return &leaderCheck{verify: verify, now: time.Now, sleep: time.Sleep}
}

// confirm returns nil once a quorum confirmed this node's leadership after
// the call began.
func (c *leaderCheck) confirm(ctx context.Context) error {
	return c.confirmOn(ctx, make(chan error, 1))
}

// confirmOn is confirm answering on ch, which must be empty and have room
// for one answer. When ctx ends first the answer still arrives on ch later,
// so ch must not be used again.
func (c *leaderCheck) confirmOn(ctx context.Context, ch chan error) error {
	if c.waited != nil {
		defer func(start time.Time) { c.waited.Observe(time.Since(start).Seconds()) }(time.Now())
	}
	c.mu.Lock()
	c.waiting = append(c.waiting, ch)
	if !c.running {
		c.running = true
		go c.run()
	}
	c.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run checks until nobody waits. It exits on its own: VerifyLeader returns
// promptly once Raft shuts down.
func (c *leaderCheck) run() {
	var last time.Time // when the previous check started
	large := false     // the previous batch was large
	for {
		if large {
			if wait := checkGap - c.now().Sub(last); wait > 0 {
				c.sleep(wait) // gather the callers arriving meanwhile
			}
		}
		c.mu.Lock()
		batch := c.waiting
		c.waiting = nil
		if len(batch) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		last, large = c.now(), len(batch) >= checkCoalesce
		err := c.verify()
		for _, ch := range batch {
			ch <- err
		}
	}
}
