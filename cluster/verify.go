package cluster

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// leaderCheck batches quorum checks of leadership. Every caller that
// arrives while no check is running starts one; callers that arrive while
// one runs wait for the next, because a check that started before their
// request arrived proves nothing about the moment after it. So one
// VerifyLeader round trip serves every heartbeat and linearizable read
// waiting at that moment.
type leaderCheck struct {
	verify func() error

	mu      sync.Mutex
	waiting []chan error
	running bool
}

func newLeaderCheck(r *raft.Raft) *leaderCheck {
	return &leaderCheck{verify: func() error { return r.VerifyLeader().Error() }}
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
	for {
		c.mu.Lock()
		batch := c.waiting
		c.waiting = nil
		if len(batch) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		err := c.verify()
		for _, ch := range batch {
			ch <- err
		}
	}
}
