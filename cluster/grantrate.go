package cluster

import (
	"sync"
	"time"
)

// grantRates counts each queue's grants over the last minute, in one-second
// buckets on the node's monotonic clock, for queue lists. It is the
// leader's memory, not replicated: a new leader starts from zero, and a
// follower, which grants nothing, counts nothing.
type grantRates struct {
	mu     sync.Mutex
	queues map[string]*grantRing
}

// grantWindow is the span a rate is counted over, in seconds.
const grantWindow = 60

// maxRateQueues bounds the queues counted: when it is reached, queues with
// no grant in the window are forgotten, and a new queue is not counted
// while every counted one is busy.
const maxRateQueues = 4096

// grantRing holds a queue's grants per second: counts[i] belongs to second
// secs[i], i being the second modulo the window.
type grantRing struct {
	secs   [grantWindow]int64
	counts [grantWindow]uint32
}

func newGrantRates() *grantRates { return &grantRates{queues: map[string]*grantRing{}} }

// record counts n grants from queue at now.
func (g *grantRates) record(queue string, n int, now time.Time) {
	sec := now.UnixNano() / int64(time.Second)
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.queues[queue]
	if r == nil {
		if len(g.queues) >= maxRateQueues {
			for q, old := range g.queues {
				if old.sum(sec) == 0 {
					delete(g.queues, q)
				}
			}
			if len(g.queues) >= maxRateQueues {
				return
			}
		}
		r = &grantRing{}
		g.queues[queue] = r
	}
	i := sec % grantWindow
	if r.secs[i] != sec {
		r.secs[i], r.counts[i] = sec, 0
	}
	r.counts[i] += uint32(n)
}

// reset forgets every count: a new term's leader starts from zero.
func (g *grantRates) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.queues)
}

// rate returns the queue's grants per second over the window ending now.
func (g *grantRates) rate(queue string, now time.Time) float64 {
	sec := now.UnixNano() / int64(time.Second)
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.queues[queue]; r != nil {
		return float64(r.sum(sec)) / grantWindow
	}
	return 0
}

// sum counts the grants of the window ending in second sec.
func (r *grantRing) sum(sec int64) uint64 {
	var n uint64
	for i, s := range r.secs {
		if s > sec-grantWindow && s <= sec {
			n += uint64(r.counts[i])
		}
	}
	return n
}

// GrantRate returns the grants per second from queue over the last minute
// that this node, as leader, granted (see grantRates).
func (n *Node) GrantRate(queue string) float64 { return n.grants.rate(queue, n.clock.Now()) }
