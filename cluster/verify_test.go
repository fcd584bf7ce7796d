package cluster

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A caller alone gets a check of its own at once; after a large batch the
// next check waits out the gap and serves everyone who arrived meanwhile.
func TestLeaderCheckCoalescesUnderLoad(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	var mu sync.Mutex
	verifies := 0
	var slept []time.Duration
	frozen := time.Unix(1000, 0) // the checks take no time on this clock
	c := &leaderCheck{now: func() time.Time { return frozen }, verify: func() error {
		mu.Lock()
		verifies++
		mu.Unlock()
		started <- struct{}{}
		<-release
		return nil
	}}
	var arrive func(n int) *sync.WaitGroup
	var waitQueued func(n int)
	c.sleep = func(d time.Duration) {
		mu.Lock()
		slept = append(slept, d)
		first := len(slept) == 1
		mu.Unlock()
		if first {
			arrive(5) // callers arriving during the gap join the next check
		}
	}
	ctx := context.Background()
	var all sync.WaitGroup
	waitQueued = func(n int) {
		for {
			c.mu.Lock()
			q := len(c.waiting)
			c.mu.Unlock()
			if q == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}

	// arrive adds n callers; queued says a check is running, so each one
	// stays queued until it ends (the test waits until it is).
	arrive = func(n int) *sync.WaitGroup {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			all.Add(1)
			c.mu.Lock()
			queued, running := len(c.waiting), c.running
			c.mu.Unlock()
			ch := make(chan error, 1)
			go func() {
				defer wg.Done()
				defer all.Done()
				if err := c.confirmOn(ctx, ch); err != nil {
					t.Error(err)
				}
			}()
			if running {
				waitQueued(queued + 1)
			}
		}
		return &wg
	}

	// Alone: one check, no gap.
	one := arrive(1)
	<-started
	release <- struct{}{}
	one.Wait()
	// The check's goroutine ends once it finds nobody waiting. Until then
	// a caller would take it for a running check and wait to see itself
	// queued, while the check it starts itself takes it off the queue.
	for {
		c.mu.Lock()
		running := c.running
		c.mu.Unlock()
		if !running {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if verifies != 1 || len(slept) != 0 {
		t.Fatalf("a lone caller: %d checks, slept %v", verifies, slept)
	}

	// A large batch forms while a check runs.
	first := arrive(1)
	<-started
	arrive(checkCoalesce + 2)
	release <- struct{}{} // the first check ends; the batch of 10 starts
	first.Wait()
	<-started
	arrive(3)
	waitQueued(3)
	release <- struct{}{} // the large batch's check ends: the gap, then 3 + 5 together
	<-started
	release <- struct{}{} // that batch is large too: a gap, and nobody left
	all.Wait()
	mu.Lock()
	defer mu.Unlock()
	if verifies != 4 {
		t.Fatalf("%d checks, want 4: the callers of the gap served by one", verifies)
	}
	if len(slept) < 1 || slept[0] != checkGap {
		t.Fatalf("slept %v, want the gap %v after the large batch", slept, checkGap)
	}
}
