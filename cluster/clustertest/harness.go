package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"math/rand/v2"

	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/clock/clocktest"
	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/api"
)

// Timings of test clusters: Raft fast enough for quick elections, executor
// timings that only matter through the fake clocks.
const (
	Renew      = 100 * time.Millisecond
	Grace      = time.Second
	Toleration = 2 * time.Second
)

// Cluster is a set of in-process nodes.
type Cluster struct {
	t      testing.TB
	Net    *Net
	Nodes  []*Node
	mod    func(i int, c *cluster.Config)
	subnet string // "127.a.b.": each cluster its own, so parallel test processes never share an address
	expect int
	join   []string
	// API, when set, adjusts each node's API options before it starts
	// (credentials, say); set it between Prepare and Start.
	API func(i int, o *api.Options)
	// APIListener, when set, wraps each node's API listener before the
	// API serves on it (to watch its connections); set it between
	// Prepare and Start.
	APIListener func(i int, ln net.Listener) net.Listener
}

// Node is one member. Node.Node is nil while it is killed.
type Node struct {
	*cluster.Node
	API       *api.HTTPServer // the node's API, served at APIAddr
	APIServer *api.Server
	Index     int
	Host      string // 127.a.b.(10+Index)
	Addr      string // Raft address, stable across restarts
	APIAddr   string
	Dir       string
	Clock     *clocktest.FakeClock
	// Disk injects write errors into the node's Raft stores.
	Disk *DiskFaults
}

// Option changes every node's configuration before it starts.
type Option func(i int, c *cluster.Config)

// New starts n nodes (1, 3 or 5) that bootstrap one cluster together
// (bootstrap-expect n, each with the full join list) and registers their
// shutdown with t.Cleanup.
func New(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	c := Prepare(t, n, opts...)
	for i := range c.Nodes {
		c.Start(i)
	}
	return c
}

// Prepare sets up n nodes (addresses, data dirs, clocks) without starting
// them; Start starts one. New is Prepare plus starting them all.
func Prepare(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n != 1 && n != 3 && n != 5 {
		t.Fatalf("clustertest: %d nodes; clusters have 1, 3 or 5", n)
	}
	c := &Cluster{t: t, Net: newNet(), expect: n,
		subnet: fmt.Sprintf("127.%d.%d.", 1+rand.IntN(250), 1+rand.IntN(250))}
	c.mod = func(i int, cfg *cluster.Config) {
		for _, o := range opts {
			o(i, cfg)
		}
	}
	for range n {
		c.addSlot()
	}
	for _, node := range c.Nodes {
		c.join = append(c.join, node.Addr)
	}
	t.Cleanup(c.Shutdown)
	return c
}

// addSlot reserves addresses and a data dir for one more node.
func (c *Cluster) addSlot() *Node {
	i := len(c.Nodes)
	host := c.subnet + strconv.Itoa(10+i)
	raftLn := c.listen(host + ":0")
	apiLn := c.listen(host + ":0")
	node := &Node{
		Index: i, Host: host, Addr: raftLn.Addr().String(), APIAddr: apiLn.Addr().String(),
		Dir: c.t.TempDir(), Clock: clocktest.NewFakeClock(), Disk: &DiskFaults{},
	}
	raftLn.Close()
	apiLn.Close()
	c.Nodes = append(c.Nodes, node)
	return node
}

// Start starts node i (prepared, or killed: it restarts from its data).
func (c *Cluster) Start(i int) {
	c.t.Helper()
	if err := c.TryStart(i); err != nil {
		c.t.Fatalf("node %d: %v", i, err)
	}
}

// TryStart is Start that returns the error of a node that does not start
// (a data dir it refuses, say).
func (c *Cluster) TryStart(i int) error {
	c.t.Helper()
	if c.Nodes[i].Node != nil {
		c.t.Fatalf("node %d is running", i)
	}
	return c.start(c.Nodes[i])
}

// Add starts one more node, without data, with the original members' join
// list, and returns it.
func (c *Cluster) Add() *Node {
	c.t.Helper()
	node := c.addSlot()
	c.Start(node.Index)
	return node
}

// SlowRaft makes Raft's timings a second long (executor timings scaled to
// stay valid): a leader cut off from its quorum keeps believing it leads
// for about a second, and no election can finish faster than that, which
// tests of deposed leaders and of leadership transfer rely on.
func SlowRaft() Option {
	return func(_ int, c *cluster.Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, time.Second
		c.Renew, c.Grace, c.Toleration = time.Second, 5*time.Second, 10*time.Second
	}
}

// Tick is node i's longest wait between two passes of the expiry loop:
// min(renew/2, grace/4). A worker's check or a lease's timeout may wake it
// sooner.
func (c *Cluster) Tick(i int) time.Duration {
	cfg := c.Config(i)
	return min(cfg.Renew/2, cfg.Grace/4)
}

// Config returns node i's configuration (as New and Restart build it).
func (c *Cluster) Config(i int) cluster.Config {
	node := c.Nodes[i]
	cfg := cluster.DefaultConfig()
	cfg.NodeID = fmt.Sprintf("node-%d", i)
	cfg.DataDir = node.Dir
	cfg.RaftBind = node.Addr
	cfg.APIAddr = node.APIAddr
	cfg.BootstrapExpect = c.expect
	cfg.Join = append([]string(nil), c.join...)
	cfg.JoinRetry = 100 * time.Millisecond
	cfg.Renew, cfg.Grace, cfg.Toleration = Renew, Grace, Toleration
	cfg.HeartbeatTimeout = 200 * time.Millisecond
	cfg.ElectionTimeout = 200 * time.Millisecond
	cfg.LeaderLeaseTimeout = 100 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.ApplyTimeout = 5 * time.Second
	cfg.Clock = node.Clock
	cfg.WrapStores = node.Disk.wrap
	cfg.Dial = c.Net.dialer(node.Host)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{
		Name: cfg.NodeID, Level: hclog.LevelFromString(os.Getenv("LEASEHOLD_TEST_LOG")), Output: testWriter{c.t},
	})
	if os.Getenv("LEASEHOLD_TEST_LOG") == "" {
		cfg.Logger = hclog.NewNullLogger()
	}
	c.mod(i, &cfg)
	return cfg
}

func (c *Cluster) start(node *Node) error {
	c.t.Helper()
	cfg := c.Config(node.Index)
	cfg.Listener = &listener{Listener: c.listen(node.Addr), net: c.Net}
	// The API port is bound before the node starts: the node dials its
	// peers from its own address, and a dial's ephemeral port could
	// otherwise be the API port it reserved (a make test run failed so,
	// the bind refused for the whole retry).
	ln := c.listen(node.APIAddr)
	n, err := cluster.New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	node.Node = n
	o := api.Options{Node: n, Logger: cfg.Logger, Cluster: TLSCluster}
	if c.API != nil {
		c.API(node.Index, &o)
	}
	node.APIServer = api.NewServer(o)
	if c.APIListener != nil {
		ln = c.APIListener(node.Index, ln)
	}
	node.API = api.Serve(node.APIServer, ln, nil)
	return nil
}

// listen binds addr. The port was free a moment ago (or was this node's
// before a kill); another process may grab it in between, so retry briefly.
func (c *Cluster) listen(addr string) net.Listener {
	c.t.Helper()
	var err error
	for try := 0; try < 50; try++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("listen %s: %v", addr, err)
	return nil
}

func (c *Cluster) stopAPI(n *Node) {
	if n.API != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n.API.Shutdown(ctx)
		cancel()
		n.API = nil
	}
}

// Kill stops node i abruptly (no leadership transfer). Its data stays.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	if n := c.Nodes[i]; n.Node != nil {
		c.stopAPI(n)
		n.Node.Kill()
		n.Node = nil
	}
}

// Stop shuts node i down gracefully (a leader hands leadership over first).
func (c *Cluster) Stop(i int) error {
	n := c.Nodes[i]
	if n.Node == nil {
		return nil
	}
	c.stopAPI(n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := n.Node.Shutdown(ctx)
	n.Node = nil
	return err
}

// Restart starts a killed node again from its data dir, at its address.
func (c *Cluster) Restart(i int) { c.t.Helper(); c.Start(i) }

// Shutdown stops every running node gracefully.
func (c *Cluster) Shutdown() {
	for i := range c.Nodes {
		c.Stop(i)
	}
}

// Running returns the nodes that are not killed.
func (c *Cluster) Running() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Node != nil {
			out = append(out, n)
		}
	}
	return out
}

// WaitFor polls cond until it holds or timeout passes, then fails the test
// with msg. Polling is on real time; cond is the condition the test needs,
// never a duration.
func (c *Cluster) WaitFor(timeout time.Duration, msg string, cond func() bool) {
	c.t.Helper()
	WaitFor(c.t, timeout, msg, cond)
}

// WaitFor is Cluster.WaitFor without a cluster.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", timeout, msg)
		}
		time.Sleep(wait)
	}
}

// Leader waits for exactly one running node to be the established leader,
// with every other running node agreeing, and returns it.
func (c *Cluster) Leader() *Node {
	c.t.Helper()
	var leader *Node
	c.WaitFor(10*time.Second, "one established leader", func() bool {
		leader = nil
		for _, n := range c.Running() {
			st := n.Status()
			if st.State == "Leader" && st.Ready {
				if leader != nil {
					return false
				}
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range c.Running() {
			if n.Status().LeaderID != leader.ID() {
				return false
			}
		}
		return true
	})
	return leader
}

// Transfer moves the leadership from from to to and waits until to leads.
// Raft gives a transfer one election timeout (200 ms here) to end, and on
// two busy cores under -race it sometimes needs longer: a transfer that
// timed out while to has not taken over is asked for again, up to five
// times. Any other error fails the test.
func (c *Cluster) Transfer(from, to *Node) {
	c.t.Helper()
	transfer := func(from *Node) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return from.TransferLeadership(ctx, to.ID(), cluster.Actor{Name: "test"})
	}
	// Raft answers a transfer that timed out before it clears its flag of a
	// transfer in progress (its leaderLoop says so), so the next try can
	// find the last one still winding down: that try is asked again until
	// the last one has ended.
	inProgress := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "leadership transfer in progress")
	}
	for try := 1; ; try++ {
		err := transfer(from)
		if inProgress(err) {
			c.WaitFor(10*time.Second, "the last transfer to end", func() bool {
				err = transfer(from)
				return !inProgress(err)
			})
		}
		if err == nil {
			break
		}
		asked := from
		if from = c.Leader(); from == to {
			break // it took over after all
		}
		if !strings.Contains(err.Error(), "leadership transfer timeout") || try == 5 {
			c.t.Fatalf("transfer from %s to %s (try %d): %v", asked.ID(), to.ID(), try, err)
		}
		c.t.Logf("transfer to %s timed out (try %d); asking %s again", to.ID(), try, from.ID())
	}
	c.WaitFor(10*time.Second, to.ID()+" to lead", func() bool { return c.Leader() == to })
}

// Partition cuts every link between the groups (node indexes); links inside
// a group stay. Nodes in no group are cut from everyone.
func (c *Cluster) Partition(groups ...[]int) {
	group := map[int]int{}
	for g, members := range groups {
		for _, i := range members {
			group[i] = g + 1
		}
	}
	for i := range c.Nodes {
		for j := i + 1; j < len(c.Nodes); j++ {
			if group[i] == 0 || group[i] != group[j] {
				c.Net.Cut(c.Nodes[i].Host, c.Nodes[j].Host)
			}
		}
	}
}

// Heal restores every link.
func (c *Cluster) Heal() { c.Net.HealAll() }

// Step advances node i's clock by d and, when node i is the established
// leader, lets its expiry loop process the step: it waits for the loop to
// be waiting on its timer first, and after the step for it to re-arm (which
// it does once it has finished the tick). Steps of at most Tick are normal
// time; a longer step is an absence of the leader.
func (c *Cluster) Step(i int, d time.Duration) {
	c.t.Helper()
	n := c.Nodes[i]
	leading := func() bool {
		if n.Node == nil {
			return false
		}
		st := n.Status()
		return st.State == "Leader" && st.Ready
	}
	// armed waits until the loop waits on its timer (the clock's only one)
	// or node i no longer leads; false if neither happens in time. The
	// leadership is polled: losing it changes nothing on the clock.
	deadline := time.Now().Add(10 * time.Second)
	armed := func() bool {
		for time.Now().Before(deadline) {
			pending, changed := n.Clock.Pending()
			if len(pending) > 0 || !leading() {
				return true
			}
			select {
			case <-changed:
			case <-time.After(20 * time.Millisecond):
			}
		}
		return false
	}
	if !armed() {
		c.t.Fatalf("node %d: expiry loop never waited on its timer", i)
	}
	if n.Clock.Advance(d) == 0 {
		return
	}
	if !armed() {
		c.t.Fatalf("node %d: expiry loop did not finish a tick", i)
	}
}

// Run advances node i's clock by total in steps of its tick.
func (c *Cluster) Run(i int, total time.Duration) {
	c.t.Helper()
	tick := c.Tick(i)
	for total > 0 {
		d := min(total, tick)
		c.Step(i, d)
		total -= d
	}
}

// Converged waits until every running node has applied the same log and
// holds the same state hash.
func (c *Cluster) Converged() {
	c.t.Helper()
	c.WaitFor(15*time.Second, "state hashes to converge", func() bool {
		running := c.Running()
		if len(running) == 0 {
			return true
		}
		idx := running[0].Status().AppliedIndex
		hash := running[0].FSM().Hash()
		for _, n := range running[1:] {
			if n.Status().AppliedIndex != idx || !bytes.Equal(hashBytes(n.FSM().Hash()), hashBytes(hash)) {
				return false
			}
		}
		return idx > 0
	})
}

func hashBytes(h [32]byte) []byte { return h[:] }

type testWriter struct{ t testing.TB }

var logMu sync.Mutex

func (w testWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
