package cluster_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// deadLeaderTimings slows Raft's own timers to 3 s and asks the voters
// after 1.5 s of silence (its floor, half the heartbeat timeout): an
// election that replaces a dead leader before Raft's timers could have
// started one is the check's, and its counter says so.
func deadLeaderTimings(_ int, c *cluster.Config) {
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 3*time.Second, 3*time.Second, time.Second
	c.DeadLeaderAfter = 1500 * time.Millisecond
	c.Renew, c.Grace, c.Toleration = 3*time.Second, 15*time.Second, 45*time.Second
}

// deadLeaderChecks is node n's leasehold_dead_leader_checks_total for an
// outcome.
func deadLeaderChecks(t *testing.T, n *clustertest.Node, outcome string) float64 {
	t.Helper()
	families, err := n.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "leasehold_dead_leader_checks_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("node %d: no leasehold_dead_leader_checks_total{outcome=%q}", n.Index, outcome)
	return 0
}

// A leader killed outright is replaced by an election a follower starts as
// soon as the other voter agrees the leader is silent, not when Raft's own
// timers (3 s here) fire; fencing tokens still only grow.
func TestDeadLeaderReplacedWhenAQuorumAgrees(t *testing.T) {
	c := clustertest.New(t, 3, deadLeaderTimings)
	old := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 2})
	do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostRequeue)})
	do(t, c, &fsm.SubmitJob{Spec: spec("b", fsm.LostRequeue)})
	g := acquire(t, old, "w", "r1")
	c.Converged()
	started := map[int]float64{}
	for _, n := range c.Running() {
		if n != old {
			started[n.Index] = deadLeaderChecks(t, n, "started")
		}
	}
	c.Kill(old.Index)
	leader := c.Leader()
	stood := func() float64 {
		sum := 0.0
		for _, n := range c.Running() {
			sum += deadLeaderChecks(t, n, "started") - started[n.Index]
		}
		return sum
	}
	// The counter moves once the stand is sent, which the new leader may
	// beat; without the check no election is counted at all.
	c.WaitFor(10*time.Second, "an election started by the dead-leader check", func() bool { return stood() >= 1 })
	if stood := stood(); stood != 1 {
		t.Fatalf("%v elections started by the dead-leader check after the kill, want 1 (node %d leads)", stood, leader.Index)
	}
	if g2 := acquire(t, leader, "w", "r2"); g2.Lease.Token <= g.Lease.Token {
		t.Fatalf("token %d after the failover, %d before", g2.Lease.Token, g.Lease.Token)
	}
}

// A follower cut off from a live leader finds no quorum of silence (the
// other follower still hears the leader) and does not stand: the leader
// leads on in its term, and the cut follower's term has not moved (a
// stand would have raised it).
func TestDeadLeaderCheckNeedsAQuorum(t *testing.T) {
	c := clustertest.New(t, 3, deadLeaderTimings)
	leader := c.Leader()
	c.Converged()
	term := leader.Status().Term
	var cut, other *clustertest.Node
	for _, n := range c.Running() {
		switch {
		case n == leader:
		case cut == nil:
			cut = n
		default:
			other = n
		}
	}
	refused, started := deadLeaderChecks(t, cut, "not_agreed"), deadLeaderChecks(t, cut, "started")
	c.Net.Cut(cut.Host, leader.Host)
	c.WaitFor(20*time.Second, "the cut follower to ask the voters", func() bool {
		return deadLeaderChecks(t, cut, "not_agreed") > refused
	})
	if st := leader.Status(); st.State != "Leader" || st.Term != term {
		t.Fatalf("the leader is %s in term %d, was Leader in term %d", st.State, st.Term, term)
	}
	if st := other.Status(); st.Term != term {
		t.Fatalf("the other follower is in term %d, was %d", st.Term, term)
	}
	if st := cut.Status(); st.Term != term || deadLeaderChecks(t, cut, "started") != started {
		t.Fatalf("the cut follower is in term %d (was %d) and stood %v times", st.Term, term, deadLeaderChecks(t, cut, "started")-started)
	}
	c.Net.HealAll()
}

// A voter that stood says so in its peer.info, which is how another voter
// that asks before the stand shows in the first one's state and term
// (a candidate still in the old term, a voter that granted its vote in
// the new one) knows not to stand as well (a run of
// TestDeadLeaderReplacedWhenAQuorumAgrees once saw both stand).
// longStandTimings are deadLeaderTimings with election timeouts of 30 s:
// a stand is not over by its time alone (deadLeaderAfter + 2 × election
// timeout) during a test, and a candidate whose pre-vote fails waits that
// long before it tries again, so Raft's own timers elect no leader for a
// while after the first follower's heartbeat timeout.
func longStandTimings(i int, c *cluster.Config) {
	deadLeaderTimings(i, c)
	c.ElectionTimeout = 30 * time.Second
	c.Grace, c.Toleration = 2*time.Minute, 6*time.Minute
}

func TestPeerInfoSaysStanding(t *testing.T) {
	c := clustertest.New(t, 3, longStandTimings)
	leader := c.Leader()
	f, o := c.Nodes[(leader.Index+1)%3], c.Nodes[(leader.Index+2)%3]
	ask := func() bool {
		info, err := o.AskPeerInfo(ctx(t), f.RaftAddr(), f.ID())
		if err != nil {
			t.Fatal(err)
		}
		return info.Standing
	}
	if ask() {
		t.Fatal("a follower that never stood says it is standing")
	}
	// Cut off from the leader, as a follower that stands is: nothing it
	// hears after the stand can decide it.
	c.Net.Cut(f.Host, leader.Host)
	c.WaitFor(10*time.Second, "the cut follower to have heard nothing for a second", func() bool {
		return time.Since(f.RaftLastContact()) > time.Second
	})
	stood := time.Now()
	f.MarkStood()
	if !ask() {
		t.Fatal("a follower that stood does not say so")
	}
	// Once it hears a leader after its stand, the election is decided, and
	// it no longer says it is standing: a later failure of that leader
	// must find nobody holding back the next stand.
	c.Net.HealAll()
	c.WaitFor(20*time.Second, "the follower to hear the leader after its stand", func() bool {
		return f.RaftLastContact().After(stood)
	})
	if ask() {
		t.Fatal("a follower that heard a leader after its stand still says it is standing")
	}
}

// A voter that stood and then heard a leader (the election it stood in
// decided, here by marking a stand while the leader leads) does not hold
// back the stand that replaces that leader when it dies. The voter with
// the larger id marks the stand, so the one the check chooses is the
// other: with the stale stand still counted, it would refuse, and Raft's
// own timers would elect the next leader instead, or none within the wait.
func TestDeadLeaderCheckAfterADecidedStand(t *testing.T) {
	c := clustertest.New(t, 3, longStandTimings)
	old := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 2})
	c.Converged()
	var followers []*clustertest.Node
	for _, n := range c.Running() {
		if n != old {
			followers = append(followers, n)
		}
	}
	x := followers[0]
	if followers[1].ID() > x.ID() {
		x = followers[1]
	}
	started := map[int]float64{}
	for _, n := range followers {
		started[n.Index] = deadLeaderChecks(t, n, "started")
	}
	stood := time.Now()
	x.MarkStood()
	c.WaitFor(10*time.Second, "the voter that stood to hear the leader after its stand", func() bool {
		return x.RaftLastContact().After(stood)
	})
	c.Kill(old.Index)
	c.WaitFor(10*time.Second, "an election started by the dead-leader check", func() bool {
		sum := 0.0
		for _, n := range followers {
			sum += deadLeaderChecks(t, n, "started") - started[n.Index]
		}
		return sum >= 1
	})
	c.Leader() // and the stand elected one
}
