package integration

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/clock/clocktest"
	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// switchNet is a client's network that a test can cut: dials fail and open
// connections close while it is off.
type switchNet struct {
	mu    sync.Mutex
	off   bool
	conns map[net.Conn]bool
}

func (s *switchNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off {
		return nil, errors.New("test: worker cut off")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		if s.conns == nil {
			s.conns = map[net.Conn]bool{}
		}
		s.conns[c] = true
	}
	return c, err
}

func (s *switchNet) set(off bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.off = off
	if off {
		for c := range s.conns {
			c.Close()
		}
		clear(s.conns)
	}
}

// newClient returns a client of the cluster, listing the nodes' API
// addresses follower-first so the first call exercises forwarding.
func newClient(t testing.TB, c *clustertest.Cluster, sw *switchNet) *client.Client {
	t.Helper()
	leader := c.Leader()
	var eps []string
	for _, n := range c.Nodes {
		if n != leader {
			eps = append(eps, n.APIAddr)
		}
	}
	eps = append(eps, leader.APIAddr)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	if sw != nil {
		tr.DialContext = sw.dial
	}
	cl, err := client.New(client.Config{Endpoints: eps, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); tr.CloseIdleConnections() })
	return cl
}

// runWorker runs a worker until the test ends. A worker on a fake clock
// drains on that clock: its clock is moved on until the worker is gone.
func runWorker(t testing.TB, opts client.WorkerOptions) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	w, err := client.NewWorker(opts)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() {
		cancel()
		fake, _ := opts.Clock.(*clocktest.FakeClock)
		for {
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("worker: %v", err)
				}
				return
			case <-time.After(10 * time.Millisecond):
				if fake != nil {
					fake.Advance(time.Second)
				}
			}
		}
	})
}

// slowExecutor keeps executor timings long in real time (the cluster's
// expiry runs on fake clocks anyway), so a worker on the system clock
// never self-stops during a failover.
func slowExecutor() clustertest.Option {
	return func(_ int, c *cluster.Config) {
		c.Renew, c.Grace, c.Toleration = 200*time.Millisecond, 2*time.Second, 10*time.Second
	}
}

func waitJob(t testing.TB, c *clustertest.Cluster, cl *client.Client, id string, cond func(*pb.Job) bool) *pb.Job {
	t.Helper()
	var job *pb.Job
	c.WaitFor(20*time.Second, "job "+id, func() bool {
		j, err := cl.Job(ctx(t), id)
		if err != nil {
			return false
		}
		job = j
		return cond(j)
	})
	return job
}
