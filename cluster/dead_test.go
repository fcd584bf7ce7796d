package cluster_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// Dead letters wait for level 6. While a voter is at level 5, a job out of
// attempts ends reported, as before, and RetryJob and PurgeJobs are
// refused UPGRADE_REQUIRED naming that voter. Once it runs this build, the
// same failure ends a job dead, and a retry queues it again: its next
// lease has a larger token.
func TestDeadLettersWaitForLevel6(t *testing.T) {
	old := true
	c := clustertest.New(t, 3, func(i int, cfg *cluster.Config) {
		cfg.Version = "v-new"
		if i == 2 && old {
			cluster.SayLevel(cfg, 5)
			cfg.Version = "v-5"
		}
		cluster.AskLevelsEvery(cfg, 100*time.Millisecond)
	})
	recorded := func(levelOld uint8) func() bool {
		return func() bool {
			for _, n := range c.Running() {
				nodes := n.FSM().Nodes()
				if len(nodes) != 3 {
					return false
				}
				for _, rec := range nodes {
					if want := uint8(fsm.Level); rec.ID == "node-2" && rec.Level != levelOld || rec.ID != "node-2" && rec.Level != want {
						return false
					}
				}
			}
			return true
		}
	}
	c.WaitFor(10*time.Second, "every level recorded, node-2 at 5", recorded(5))
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 1})
	failOut := func(id, req string) fsm.Grant {
		s := spec(id, fsm.LostRequeue)
		s.MaxAttempts = 1
		do(t, c, &fsm.SubmitJob{Spec: s})
		g := acquire(t, c.Leader(), "w1", req)
		do(t, c, &fsm.Report{WorkerID: "w1", JobID: id, Token: g.Lease.Token, ReportID: req, Outcome: fsm.OutcomeFailed, Retryable: true, Message: "exit 75"})
		return g
	}
	failOut("before", "r1")
	if j, _ := c.Leader().FSM().Job("before"); j.State != fsm.JobReported {
		t.Fatalf("at level 5 a job out of attempts ends %s, want reported", j.State)
	}
	for _, cmd := range []fsm.Command{&fsm.RetryJob{JobID: "before"}, &fsm.PurgeJobs{Queue: "default", Limit: 10}} {
		_, err := c.Leader().Apply(ctx(t), cmd)
		var up *cluster.UpgradeError
		if !errors.As(err, &up) || up.Need != 6 || len(up.Nodes) != 1 || !strings.HasPrefix(up.Nodes[0], "node-2 (level 5") {
			t.Fatalf("%T at level 5: %v, want UPGRADE_REQUIRED naming node-2", cmd, err)
		}
	}

	old = false
	if err := c.Stop(2); err != nil {
		t.Fatal(err)
	}
	c.Restart(2)
	c.WaitFor(20*time.Second, "node-2 recorded at this build's level", recorded(fsm.Level))
	g := failOut("after", "r2")
	j, _ := c.Leader().FSM().Job("after")
	if j.State != fsm.JobDead || j.Reason() != "out of attempts (1 of 1): exit 75" {
		t.Fatalf("at level 6 a job out of attempts: %s %q, want dead", j.State, j.Reason())
	}
	if got := do(t, c, &fsm.RetryJob{JobID: "after"}).(fsm.Job); got.State != fsm.JobQueued {
		t.Fatalf("retried: %s", got.State)
	}
	if again := acquire(t, c.Leader(), "w1", "r3"); again.Job.ID != "after" || again.Lease.Token <= g.Lease.Token {
		t.Fatalf("after the retry: %s token %d, want after with a token above %d", again.Job.ID, again.Lease.Token, g.Lease.Token)
	}
}

// Dead jobs wait DeadRetention to be retried, then the leader's compaction
// purges them, by the state's own time: a job dead for longer goes, one
// dead for less stays.
func TestDeadJobsPurgedAfterRetention(t *testing.T) {
	c := clustertest.New(t, 1, func(i int, cfg *cluster.Config) {
		cfg.DeadRetention = time.Hour
		cfg.CompactInterval = 20 * time.Millisecond
		cluster.AskLevelsEvery(cfg, 100*time.Millisecond)
	})
	c.WaitFor(10*time.Second, "the level recorded", func() bool {
		return c.Leader().ClusterLevel() == fsm.Level
	})
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 1})
	failOut := func(id string) {
		s := spec(id, fsm.LostRequeue)
		s.MaxAttempts = 1
		do(t, c, &fsm.SubmitJob{Spec: s})
		g := acquire(t, c.Leader(), "w1", "r-"+id)
		do(t, c, &fsm.Report{WorkerID: "w1", JobID: id, Token: g.Lease.Token, ReportID: "r-" + id, Outcome: fsm.OutcomeFailed, Retryable: true})
		if j, _ := c.Leader().FSM().Job(id); j.State != fsm.JobDead {
			t.Fatalf("%s ended %s, want dead", id, j.State)
		}
	}
	failOut("old")
	c.Nodes[0].Clock.ShiftWall(2 * time.Hour)
	failOut("young")
	c.WaitFor(10*time.Second, "the old dead job purged", func() bool {
		_, err := c.Leader().FSM().Job("old")
		return errors.Is(err, fsm.ErrNotFound)
	})
	if j, err := c.Leader().FSM().Job("young"); err != nil || j.State != fsm.JobDead {
		t.Fatalf("the young dead job: %v %v, want kept", j.State, err)
	}
}

// appliesOf counts the commands of cmd's type this node proposed and saw
// applied (leasehold_apply_seconds).
func appliesOf(t *testing.T, n *clustertest.Node, cmd fsm.Command) uint64 {
	t.Helper()
	if m := labelled(t, n, "leasehold_apply_seconds", "command", cmd.Type().String()); m != nil {
		return m.GetHistogram().GetSampleCount()
	}
	return 0
}

// labelled is the series of family on n whose label is value, or nil.
func labelled(t *testing.T, n *clustertest.Node, family, label, value string) *dto.Metric {
	t.Helper()
	families, err := n.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m
				}
			}
		}
	}
	return nil
}

// A dead job younger than the retention costs no entry: the leader's
// compaction passes propose no PurgeJobs until a dead job is past it, by
// the state's time, and then one purges it.
func TestDeadPurgeProposedOnlyWhenDue(t *testing.T) {
	c := clustertest.New(t, 1, func(i int, cfg *cluster.Config) {
		cfg.DeadRetention = time.Hour
		cfg.CompactInterval = 10 * time.Millisecond
		cluster.AskLevelsEvery(cfg, 100*time.Millisecond)
	})
	c.WaitFor(10*time.Second, "the level recorded", func() bool { return c.Leader().ClusterLevel() == fsm.Level })
	leader := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 1})
	s := spec("young", fsm.LostRequeue)
	s.MaxAttempts = 1
	do(t, c, &fsm.SubmitJob{Spec: s})
	g := acquire(t, leader, "w1", "r1")
	do(t, c, &fsm.Report{WorkerID: "w1", JobID: "young", Token: g.Lease.Token, ReportID: "r1", Outcome: fsm.OutcomeFailed, Retryable: true})
	if j, _ := leader.FSM().Job("young"); j.State != fsm.JobDead {
		t.Fatalf("young ended %s, want dead", j.State)
	}
	compacts := appliesOf(t, leader, &fsm.Compact{})
	c.WaitFor(10*time.Second, "ten compaction passes", func() bool { return appliesOf(t, leader, &fsm.Compact{}) >= compacts+10 })
	if k := appliesOf(t, leader, &fsm.PurgeJobs{}); k != 0 {
		t.Fatalf("%d PurgeJobs proposed while the only dead job is younger than the retention, want none", k)
	}
	c.Nodes[0].Clock.ShiftWall(2 * time.Hour)
	c.WaitFor(10*time.Second, "the dead job purged once past the retention", func() bool {
		_, err := leader.FSM().Job("young")
		return errors.Is(err, fsm.ErrNotFound)
	})
	// The metric is observed once the proposal returns, just after the apply.
	c.WaitFor(10*time.Second, "the purge counted", func() bool { return appliesOf(t, leader, &fsm.PurgeJobs{}) >= 1 })
	compacts = appliesOf(t, leader, &fsm.Compact{})
	c.WaitFor(10*time.Second, "ten more compaction passes", func() bool { return appliesOf(t, leader, &fsm.Compact{}) >= compacts+10 })
	if k := appliesOf(t, leader, &fsm.PurgeJobs{}); k != 1 {
		t.Fatalf("%d PurgeJobs proposed for one due dead job, want 1", k)
	}
}
