package cluster_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// timedCluster is a cluster whose nodes' wall clocks (what the leader
// stamps on commands) move only with the fake clocks, and a worker "w".
func timedCluster(t *testing.T, opts ...clustertest.Option) (*clustertest.Cluster, *clustertest.Node) {
	c := clustertest.New(t, 3, opts...)
	for _, n := range c.Nodes {
		n.Clock.MoveWall()
	}
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 2})
	c.WaitFor(10*time.Second, "every voter's level recorded", func() bool {
		return c.Leader().ClusterLevel() >= fsm.CodecOf(&fsm.TimeOut{})
	})
	return c, c.Leader()
}

// submitTimed submits a job with a timeout and a retry policy of a fixed
// 2 s backoff.
func submitTimed(t *testing.T, c *clustertest.Cluster, id string, timeout time.Duration) {
	t.Helper()
	s := spec(id, fsm.LostRequeue)
	s.Retry = &fsm.RetryPolicy{Initial: int64(2 * time.Second), Max: int64(2 * time.Second), Multiplier: 1000}
	do(t, c, &fsm.SubmitJob{Spec: s, TimeoutMs: uint32(timeout / time.Millisecond)})
}

// beatFor advances the leader's clock by total while the worker heartbeats
// every half second, as a live worker does, and returns the last answer
// for the lease.
func beatFor(t *testing.T, c *clustertest.Cluster, leader *clustertest.Node, g fsm.Grant, total time.Duration) cluster.LeaseStatus {
	t.Helper()
	var st cluster.LeaseStatus
	for total > 0 {
		d := min(total, 500*time.Millisecond)
		c.Run(leader.Index, d)
		total -= d
		st = heartbeat(t, leader, "w", g).Leases[0]
	}
	return st
}

func timedOutEvents(t *testing.T, n *clustertest.Node) []fsm.Event {
	t.Helper()
	var out []fsm.Event
	for _, ev := range n.FSM().Events(0, fsm.MaxPageSize).Events {
		if ev.Type == fsm.EventLeaseTimedOut {
			out = append(out, ev)
		}
	}
	return out
}

// TestTimeoutRevokesAtTheLeadersTime: a job with a 10 s timeout, granted,
// is left alone for 9 s of the leader's time while its worker heartbeats;
// past 10 s the leader revokes the lease, the worker's heartbeat reply
// says kill, its report of killed ends the attempt timed out (counted),
// the job waits out its retry backoff, and the next grant has a larger
// token.
func TestTimeoutRevokesAtTheLeadersTime(t *testing.T) {
	c, leader := timedCluster(t)
	submitTimed(t, c, "slow", 10*time.Second)
	g := acquire(t, leader, "w", "r1")
	deadline := g.Lease.GrantedAt + int64(10*time.Second)

	if st := beatFor(t, c, leader, g, 9*time.Second); st.Verdict != cluster.VerdictKeep {
		t.Fatalf("after 9 s: %+v, want keep", st)
	}
	if evs := timedOutEvents(t, leader); len(evs) != 0 {
		t.Fatalf("timed out after 9 s: %+v", evs)
	}
	st := beatFor(t, c, leader, g, 1500*time.Millisecond)
	if st.Verdict != cluster.VerdictStop || st.Revoke != fsm.RevokeKill {
		t.Fatalf("past 10 s: %+v, want stop with kill", st)
	}
	evs := timedOutEvents(t, leader)
	if len(evs) != 1 || evs[0].Token != g.Lease.Token || evs[0].Time < deadline {
		t.Fatalf("timed-out events %+v, want one for token %d at or after %d", evs, g.Lease.Token, deadline)
	}

	rep := do(t, c, &fsm.Report{WorkerID: "w", JobID: "slow", Token: g.Lease.Token, ReportID: "k", Outcome: fsm.OutcomeKilled}).(fsm.ReportResult)
	j, err := leader.FSM().Job("slow")
	if err != nil || !rep.Requeued || j.Attempts != 1 || j.Leases()[0].Outcome != fsm.OutcomeTimedOut {
		t.Fatalf("after the kill: %+v, job %+v %v", rep, j, err)
	}
	if j.NotBefore != j.Leases()[0].EndedAt+int64(2*time.Second) {
		t.Fatalf("queued again not before %d, want the report's time + 2 s", j.NotBefore)
	}
	res, err := leader.Acquire(ctx(t), fsm.Acquire{WorkerID: "w", RequestID: "early", Queues: []string{"default"}, Max: 1}, 50*time.Millisecond)
	if err != nil || len(res.Grants) != 0 {
		t.Fatalf("an acquire during the backoff: %+v %v", res, err)
	}
	c.Run(leader.Index, 2*time.Second)
	g2 := acquire(t, leader, "w", "r2")
	if g2.Job.ID != "slow" || g2.Lease.Token <= g.Lease.Token {
		t.Fatalf("second grant %s token %d after token %d", g2.Job.ID, g2.Lease.Token, g.Lease.Token)
	}
}

// TestTimedOutLeaseThatExpiresCountsAnAttempt: a worker silent past its
// job's timeout and then past toleration loses the lease, but the
// execution counts as an attempt (a timeout), not as a loss; a lease that
// expires without a timeout is a loss, never an attempt.
func TestTimedOutLeaseThatExpiresCountsAnAttempt(t *testing.T) {
	c, leader := timedCluster(t)
	submitTimed(t, c, "hung", time.Second)
	g := acquire(t, leader, "w", "r1")
	do(t, c, &fsm.SubmitJob{Spec: spec("plain", fsm.LostRequeue)})
	p := acquire(t, leader, "w", "r2")
	c.Run(leader.Index, clustertest.Toleration+time.Second)
	c.WaitFor(10*time.Second, "both leases to end", func() bool {
		a, _ := leader.FSM().Lease(g.Lease.Token)
		b, _ := leader.FSM().Lease(p.Lease.Token)
		return a.State == fsm.LeaseExpired && b.State == fsm.LeaseExpired
	})
	j, _ := leader.FSM().Job("hung")
	if j.State != fsm.JobQueued || j.Attempts != 1 || j.Losses != 0 || j.Leases()[0].Outcome != fsm.OutcomeTimedOut {
		t.Fatalf("timed out, then expired: %s attempts %d losses %d outcome %s", j.State, j.Attempts, j.Losses, j.Leases()[0].Outcome)
	}
	if j, _ := leader.FSM().Job("plain"); j.Attempts != 0 || j.Losses != 1 {
		t.Fatalf("expired without a timeout: attempts %d losses %d, want a loss only", j.Attempts, j.Losses)
	}
}

// TestNoTimeoutBelowLevel6: while a voter says a level below TimeOut's
// codec, a job with a timeout is refused UPGRADE_REQUIRED, and the leader
// proposes no TimeOut, even for a lease granted before that voter went
// back to an older build.
func TestNoTimeoutBelowLevel6(t *testing.T) {
	old := -1 // the node that runs an older build
	c, leader := timedCluster(t, func(i int, cfg *cluster.Config) {
		if i == old {
			cluster.SayLevel(cfg, fsm.CodecOf(&fsm.TimeOut{})-1)
		}
		cluster.AskLevelsEvery(cfg, 100*time.Millisecond)
	})
	submitTimed(t, c, "slow", time.Second)
	g := acquire(t, leader, "w", "r1")
	follower := (leader.Index + 1) % 3
	old = follower
	if err := c.Stop(follower); err != nil {
		t.Fatal(err)
	}
	c.Restart(follower)
	c.Nodes[follower].Clock.MoveWall()
	c.WaitFor(20*time.Second, "the leader to hear the older level", func() bool {
		return leader.ClusterLevel() < fsm.CodecOf(&fsm.TimeOut{})
	})
	if l, _ := leader.FSM().Lease(g.Lease.Token); l.State != fsm.LeaseActive || l.Revoke != fsm.RevokeNone {
		t.Fatalf("lease %+v before its timeout", l)
	}
	if st := beatFor(t, c, leader, g, 3*time.Second); st.Verdict != cluster.VerdictKeep {
		t.Fatalf("past its timeout below level 6: %+v, want keep", st)
	}
	if evs := timedOutEvents(t, leader); len(evs) != 0 {
		t.Fatalf("timed out below level 6: %+v", evs)
	}
	s := spec("refused", fsm.LostRequeue)
	if _, err := leader.Apply(ctx(t), &fsm.SubmitJob{Spec: s, TimeoutMs: 1000}); !errors.Is(err, cluster.ErrUpgradeRequired) {
		t.Fatalf("a job with a timeout below level 6: %v, want UPGRADE_REQUIRED", err)
	}
}
