package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
)

// crashed is a node that exited without Kill or Upgrade ending it, or nil.
func (c *Cluster) crashed() *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.proc != nil && n.proc.Exited() && !n.killed {
			return n
		}
	}
	return nil
}

// WaitReady waits until every running node is ready (/readyz) and names
// the same leader, a running node, and returns its index. A node that
// exits meanwhile, not killed, fails the wait at once with the tail of its
// log.
func (c *Cluster) WaitReady(ctx context.Context) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	leader := -1
	var crash error
	err := poll.Until(ctx, func() error {
		if n := c.crashed(); n != nil {
			crash = fmt.Errorf("localcluster: %s exited (%v); its log:\n%s", n.id, n.proc.State(), tailFile(n.logPath))
			cancel()
			return crash
		}
		var err error
		leader, err = c.agreedLeader(ctx)
		return err
	})
	if crash != nil {
		return -1, crash
	}
	if err != nil {
		return -1, fmt.Errorf("localcluster: no leader every node agrees on: %w", err)
	}
	return leader, nil
}

// Leader returns the index of the node every running node names as
// leader, waiting for one until ctx ends.
func (c *Cluster) Leader(ctx context.Context) (int, error) { return c.WaitReady(ctx) }

func (c *Cluster) agreedLeader(ctx context.Context) (int, error) {
	leader := -1
	for i, n := range c.nodes {
		if c.Exited(i) {
			continue
		}
		r, err := c.ready(ctx, n.apiAddr)
		if err != nil {
			return -1, err
		}
		if !r.Ready || r.LeaderAPI == "" {
			return -1, fmt.Errorf("%s not ready (state %s)", n.id, r.State)
		}
		l := c.index(r.LeaderAPI)
		if l < 0 || c.Exited(l) {
			return -1, fmt.Errorf("%s names leader %s, not a running node", n.id, r.LeaderAPI)
		}
		if leader >= 0 && leader != l {
			return -1, fmt.Errorf("nodes disagree on the leader: %s and %s", c.nodes[leader].id, c.nodes[l].id)
		}
		leader = l
	}
	if leader < 0 {
		return -1, errors.New("no node running")
	}
	return leader, nil
}

// readiness is /readyz's answer (the path is open: no credentials).
type readiness struct {
	Ready     bool   `json:"ready"`
	State     string `json:"state"`
	LeaderAPI string `json:"leader_api"`
}

// Ready reports whether node i answers /readyz ready.
func (c *Cluster) Ready(ctx context.Context, i int) (bool, error) {
	r, err := c.ready(ctx, c.nodes[i].apiAddr)
	return r.Ready, err
}

func (c *Cluster) ready(ctx context.Context, addr string) (readiness, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return readiness{}, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return readiness{}, err
	}
	defer resp.Body.Close()
	var r readiness
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&r); err != nil {
		return readiness{}, fmt.Errorf("/readyz at %s: %w", addr, err)
	}
	return r, nil
}
