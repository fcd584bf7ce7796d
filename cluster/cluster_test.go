package cluster_test

import (
	"context"
	"errors"

	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// No goroutine may outlive the tests. hashicorp/raft never answers an
// entry still in its apply queue when it shuts down; waitRaft stops
// waiting on it without a goroutine of its own (apply.go), so none is
// left behind for it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func spec(id string, policy fsm.LostPolicy) fsm.JobSpec {
	return fsm.JobSpec{ID: id, Queue: "default", Kind: "eval", Payload: []byte(id),
		MaxAttempts: 3, OnWorkerLost: policy, MaxWorkerLosses: 5}
}

// do proposes on the current leader, retrying while leadership moves.
func do(t testing.TB, c *clustertest.Cluster, cmd fsm.Command) any {
	t.Helper()
	var v any
	err := retryOnLeader(c, func(n *clustertest.Node) (err error) {
		v, err = n.Apply(ctx(t), cmd)
		return err
	})
	if err != nil {
		t.Fatalf("%T: %v", cmd, err)
	}
	return v
}

// retryOnLeader runs op on the current leader until it succeeds or fails
// for a reason other than leadership moving (not the leader, none yet, not
// ready, or lost while committing: a proposal whose outcome was lost is
// proposed again, so op must be idempotent), and returns its last error.
func retryOnLeader(c *clustertest.Cluster, op func(*clustertest.Node) error) error {
	for try := 0; ; try++ {
		err := op(c.Leader())
		if err == nil || try > 20 || !(errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrNoLeader) ||
			errors.Is(err, cluster.ErrNotReady) || errors.Is(err, cluster.ErrLeadershipLost)) {
			return err
		}
	}
}

func acquire(t testing.TB, n *clustertest.Node, worker, req string) fsm.Grant {
	t.Helper()
	res, err := n.Acquire(ctx(t), fsm.Acquire{WorkerID: worker, RequestID: req, Queues: []string{"default"}, Max: 1}, time.Second)
	if err != nil || len(res.Grants) != 1 {
		t.Fatalf("acquire by %s: %+v %v", worker, res, err)
	}
	return res.Grants[0]
}

func TestThreeNodesFormAndReplicate(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 2})
	do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostRequeue)})
	g := acquire(t, leader, "w1", "r1")
	do(t, c, &fsm.Report{WorkerID: "w1", JobID: "a", Token: g.Lease.Token, ReportID: "rep", Outcome: fsm.OutcomeSucceeded})
	c.Converged()
	for _, n := range c.Running() {
		j, err := n.FSM().Job("a")
		if err != nil || j.State != fsm.JobReported {
			t.Fatalf("node %d: job %+v %v", n.Index, j, err)
		}
		if len(n.FSM().Nodes()) != 3 {
			t.Fatalf("node %d knows nodes %+v", n.Index, n.FSM().Nodes())
		}
	}
	members, err := leader.Members()
	if err != nil || len(members) != 3 {
		t.Fatalf("members %+v %v", members, err)
	}
	for _, m := range members {
		if m.APIAddr == "" {
			t.Fatalf("member %s has no API address", m.ID)
		}
	}
}

// A follower refuses a proposal with the leader's id and API address.
func TestFollowerNamesLeader(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	c.Converged()
	for _, n := range c.Running() {
		if n == leader {
			continue
		}
		c.WaitFor(5*time.Second, "follower to know the leader's API address", func() bool {
			_, err := n.Apply(ctx(t), &fsm.RegisterWorker{WorkerID: "w", Capacity: 1})
			var nl *cluster.NotLeaderError
			return errors.As(err, &nl) && errors.Is(err, cluster.ErrNotLeader) &&
				nl.LeaderID == leader.ID() && nl.LeaderAPI == leader.APIAddr
		})
	}
}

func asConfigError(err error, target **cluster.ConfigError) bool { return errors.As(err, target) }

// isolate cuts n off from every other node and returns their indexes.
func isolate(c *clustertest.Cluster, n *clustertest.Node) []int {
	var others []int
	for _, o := range c.Nodes {
		if o != n {
			others = append(others, o.Index)
		}
	}
	c.Partition([]int{n.Index}, others)
	return others
}

// leaderAmong waits for a ready leader among the nodes of these indexes.
func leaderAmong(c *clustertest.Cluster, indexes []int) *clustertest.Node {
	var leader *clustertest.Node
	c.WaitFor(15*time.Second, "a leader among the majority", func() bool {
		for _, i := range indexes {
			if st := c.Nodes[i].Status(); st.State == "Leader" && st.Ready {
				leader = c.Nodes[i]
				return true
			}
		}
		return false
	})
	return leader
}

// A node's leader hint names a new leader as soon as its Raft does,
// however fresh its last answer for the old one.
func TestLeaderHintFollowsTheLeader(t *testing.T) {
	c := clustertest.New(t, 3)
	old := c.Leader()
	c.Converged()
	f, target := c.Nodes[(old.Index+1)%3], c.Nodes[(old.Index+2)%3]
	c.WaitFor(5*time.Second, "the follower's hint to name the leader, and its table the target", func() bool {
		id, api := f.Leader()
		rec, ok := f.FSM().Node(target.ID())
		return id == old.ID() && api == old.APIAddr && ok && rec.APIAddr == target.APIAddr
	})
	c.Transfer(old, target)
	c.WaitFor(10*time.Second, "the follower's Raft to name the new leader", func() bool {
		return f.Status().LeaderID == target.ID()
	})
	f.HintLeader(old.ID(), old.APIAddr) // an answer for the old leader, just made
	if id, api := f.Leader(); id != target.ID() || api != target.APIAddr {
		t.Fatalf("hint names %s at %q, want the new leader %s at %q", id, api, target.ID(), target.APIAddr)
	}
}
