package cluster_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
)

func TestTransferRemoveAndRejoin(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	target := c.Nodes[(leader.Index+1)%3]
	if err := leader.TransferLeadership(ctx(t), target.ID(), cluster.Actor{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	if l := c.Leader(); l != target {
		t.Fatalf("leader is %s after transfer to %s", l.ID(), target.ID())
	}
	// Remove a follower, then let it join again through a peer.
	gone := c.Nodes[(target.Index+1)%3]
	if err := target.RemoveNode(ctx(t), gone.ID(), cluster.Actor{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	var members []cluster.Member
	defer func() {
		if t.Failed() {
			t.Logf("members %+v; target %+v", members, target.Status())
		}
	}()
	c.WaitFor(10*time.Second, "two members", func() bool {
		members, _ = target.Members()
		return len(members) == 2
	})
	if _, ok := target.FSM().Node(gone.ID()); ok {
		t.Fatal("removed node still in the node table")
	}
	c.Kill(gone.Index)
	c.Restart(gone.Index) // its data says it was a member; ask to be one again
	if err := gone.Join(ctx(t), target.RaftAddr()); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(10*time.Second, "three members with API addresses", func() bool {
		m, _ := c.Leader().Members()
		if len(m) != 3 {
			return false
		}
		for _, x := range m {
			if x.APIAddr == "" {
				return false
			}
		}
		return true
	})
	c.Converged()
}

// A node an admin removed while it runs is not taken back by its own
// background work. A running node whose record in the node table is
// missing or stale asks the leader to refresh it; that request used to
// add the node as a voter too, so a node removed while its record was
// missing (removed right after the cluster formed, as CI's
// TestTransferRemoveAndRejoin did) was a voter again within a tick.
func TestRemovedNodeIsNotTakenBack(t *testing.T) {
	holds := make([]atomic.Bool, 3)
	c := clustertest.New(t, 3, func(i int, cfg *cluster.Config) {
		cluster.HoldRefresh(cfg, &holds[i])
		cluster.AskLevelsEvery(cfg, time.Hour) // the level records stay out of the way
	})
	leader := c.Leader()
	gone := c.Nodes[(leader.Index+1)%3]
	hasRecord := func(n *clustertest.Node) bool { _, ok := n.FSM().Node(gone.ID()); return ok }
	levelsRecorded(t, c, leader)    // the level loop's first pass is over
	holds[leader.Index].Store(true) // only the node's own refresh writes its record now

	// A voter whose record went gets it back through its refresh.
	do(t, c, &fsm.RemoveNode{NodeID: gone.ID()})
	c.WaitFor(10*time.Second, "the voter's record written again by its refresh", func() bool { return hasRecord(leader) })

	// Its record gone again and its refresh held, the node is removed.
	holds[gone.Index].Store(true)
	do(t, c, &fsm.RemoveNode{NodeID: gone.ID()})
	c.WaitFor(10*time.Second, "the node to see its record gone", func() bool { return !hasRecord(gone) })
	if err := leader.RemoveNode(ctx(t), gone.ID(), cluster.Actor{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	holds[gone.Index].Store(false)
	holds[leader.Index].Store(false)
	// It asks at its next tick, if it still knows the leader: the leader
	// no longer sends it anything, so after a heartbeat timeout it asks
	// nobody. Either way it must stay out.
	c.WaitFor(10*time.Second, "the removed node's refresh refused, or its leader forgotten", func() bool {
		return gone.RefreshRefused() || gone.Status().LeaderID == ""
	})
	stayedOut(t, leader, gone.ID())
	// The request it sends, replayed: refused not_member.
	err := gone.AskRefreshVia(ctx(t), leader.RaftAddr())
	var rerr *transport.RPCError
	if !errors.As(err, &rerr) || rerr.Code != transport.CodeNotMember {
		t.Errorf("removed node asking to refresh its record: got %v, want %s", err, transport.CodeNotMember)
	}
	// An explicit join still takes it back.
	if err := gone.Join(ctx(t), leader.RaftAddr()); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(10*time.Second, "three members", func() bool {
		m, _ := c.Leader().Members()
		return len(m) == 3
	})
}

// stayedOut fails the test if the removed node id is a voter again, or
// its record is back in the leader's node table.
func stayedOut(t *testing.T, leader *clustertest.Node, id string) {
	t.Helper()
	members, err := leader.Members()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.ID == id {
			t.Fatalf("removed node %s is a voter again: %+v", id, members)
		}
	}
	if _, ok := leader.FSM().Node(id); ok {
		t.Fatalf("removed node %s's record is back in the node table", id)
	}
}

// levelsRecorded waits until every voter's record carries its level: the
// leader's first pass of level records is over.
func levelsRecorded(t *testing.T, c *clustertest.Cluster, leader *clustertest.Node) {
	t.Helper()
	c.WaitFor(10*time.Second, "every voter's level recorded", func() bool {
		for _, n := range c.Nodes {
			if rec, ok := leader.FSM().Node(n.ID()); !ok || rec.Level == 0 {
				return false
			}
		}
		return true
	})
}

// A removal that lands while the leader confirms a refresh's claim (a
// round trip to the node) wins: the leader looks at the voters again
// before it writes anything, and refuses the refresh.
func TestRemovalDuringRefreshWins(t *testing.T) {
	var paused, resume chan struct{}
	var pauseFor atomic.Value // the node id whose claim pauses
	pauseFor.Store("")
	paused, resume = make(chan struct{}), make(chan struct{})
	holds := make([]atomic.Bool, 3)
	c := clustertest.New(t, 3, func(i int, cfg *cluster.Config) {
		cluster.HoldRefresh(cfg, &holds[i])
		cluster.AskLevelsEvery(cfg, time.Hour)
		cluster.AfterClaim(cfg, func(id string) {
			if id == pauseFor.Load().(string) {
				pauseFor.Store("")
				close(paused)
				<-resume
			}
		})
	})
	leader := c.Leader()
	gone := c.Nodes[(leader.Index+1)%3]
	levelsRecorded(t, c, leader)
	for i := range holds {
		holds[i].Store(true) // nobody writes records but the test
	}
	do(t, c, &fsm.RemoveNode{NodeID: gone.ID()}) // its record only: it is a voter still

	pauseFor.Store(gone.ID())
	refreshed := make(chan error, 1)
	go func() { refreshed <- gone.AskRefreshVia(ctx(t), leader.RaftAddr()) }()
	select {
	case <-paused:
	case err := <-refreshed:
		t.Fatalf("the refresh ended before its claim was confirmed: %v", err)
	}
	if err := leader.RemoveNode(ctx(t), gone.ID(), cluster.Actor{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	close(resume)
	err := <-refreshed
	var rerr *transport.RPCError
	if !errors.As(err, &rerr) || rerr.Code != transport.CodeNotMember {
		t.Errorf("a refresh whose node was removed while its claim was confirmed: got %v, want %s", err, transport.CodeNotMember)
	}
	stayedOut(t, leader, gone.ID())
}

// Graceful shutdown of the leader hands leadership over first: the moment
// Shutdown returns, another node is already campaigning or leading, sooner
// than any election after a timeout (a second here) could start one.
func TestGracefulLeaderShutdownTransfers(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.SlowRaft())
	leader := c.Leader()
	term := leader.Status().Term
	if err := c.Stop(leader.Index); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Running() {
		if st := n.Status(); st.Term > term && (st.State == "Leader" || st.State == "Candidate") {
			c.Leader()
			return
		}
	}
	t.Fatal("no node campaigns right after the leader's graceful shutdown: leadership was not transferred")
}

// The same command line on every node forms the cluster whatever order the
// nodes start in, and restarts it.
func TestStaggeredFirstBoot(t *testing.T) {
	c := clustertest.Prepare(t, 3)
	c.Start(2)
	c.WaitFor(5*time.Second, "node 2 to try its peers a few times", func() bool {
		return !c.Nodes[2].Status().Ready
	})
	c.Start(0)
	c.Start(1)
	c.Leader()
	c.Converged()
}

// A node without data never forms a cluster of its own while its peers are
// in one, even one without a leader at the moment: it waits and joins.
func TestFreshNodeJoinsLeaderlessCluster(t *testing.T) {
	c := clustertest.New(t, 3)
	c.Leader()
	c.Kill(2)
	c.Partition([]int{0}, []int{1})
	c.WaitFor(10*time.Second, "the cluster to lose its leader", func() bool {
		_, api := c.Nodes[0].Leader()
		_, api1 := c.Nodes[1].Leader()
		return api == "" && api1 == ""
	})
	fresh := c.Add()
	c.WaitFor(5*time.Second, "the fresh node to ask around", func() bool { return fresh.Status().State != "" })
	if st := fresh.Status(); st.Ready || st.LastIndex != 0 {
		t.Fatalf("the fresh node formed or joined something while the cluster had no leader: %+v", st)
	}
	c.Heal()
	c.Restart(2)
	c.WaitFor(15*time.Second, "the fresh node to join", func() bool {
		m, _ := c.Leader().Members()
		return len(m) == 4
	})
	c.Converged()
}

func TestConfigValidation(t *testing.T) {
	base := func() cluster.Config {
		c := cluster.DefaultConfig()
		c.DataDir, c.RaftBind, c.APIAddr = t.TempDir(), "127.0.0.1:7000", "127.0.0.1:7001"
		return c
	}
	if c := base(); c.Validate() != nil {
		t.Fatalf("defaults: %v", c.Validate())
	}
	for _, tc := range []struct {
		field string
		mod   func(c *cluster.Config)
	}{
		{"renew_seconds", func(c *cluster.Config) { c.Renew = c.Grace }},
		{"grace_seconds", func(c *cluster.Config) { c.Grace = c.Toleration }},
		{"toleration_seconds", func(c *cluster.Config) {
			c.Renew, c.Grace, c.Toleration = 10*time.Second, 12*time.Second, 25*time.Second
		}},
		{"raft_election_timeout", func(c *cluster.Config) { c.ElectionTimeout = c.Grace / 2 }},
		{"bootstrap_expect", func(c *cluster.Config) { c.BootstrapExpect = 2 }},
		{"join", func(c *cluster.Config) { c.BootstrapExpect = 3 }},
		{"join", func(c *cluster.Config) { c.BootstrapExpect, c.Join = 3, []string{"a:1", "b:1", "c:1", "d:1"} }},
		{"join", func(c *cluster.Config) { c.BootstrapExpect, c.Join = 3, []string{"a:1", "nohost"} }},
		{"api_addr", func(c *cluster.Config) { c.APIAddr = "h:0" }},
		{"data_dir", func(c *cluster.Config) { c.DataDir = "" }},
		{"renew_seconds", func(c *cluster.Config) { c.Renew = 0 }},
		{"worker_gc_seconds", func(c *cluster.Config) { c.WorkerGCThreshold = 2*c.Toleration - time.Second }},
		{"worker_gc_seconds", func(c *cluster.Config) { c.WorkerGCThreshold = 0 }},
		{"max_workers", func(c *cluster.Config) { c.MaxWorkers = 0 }},
		{"max_workers", func(c *cluster.Config) { c.MaxWorkers = fsm.MaxWorkers + 1 }},
		// hashicorp/raft's floors, named before raft refuses them.
		{"raft_heartbeat_timeout", func(c *cluster.Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 4*time.Millisecond, 4*time.Millisecond, 4*time.Millisecond
		}},
		{"raft_commit_timeout", func(c *cluster.Config) { c.CommitTimeout = time.Millisecond / 2 }},
		{"snapshot_interval", func(c *cluster.Config) { c.SnapshotInterval = time.Millisecond }},
	} {
		c := base()
		tc.mod(&c)
		err := c.Validate()
		var ce *cluster.ConfigError
		if !asConfigError(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: got %v", tc.field, err)
		}
	}
}
