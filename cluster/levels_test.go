package cluster_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
)

// A rolling upgrade. While one voter runs a build from before levels, the
// leader proposes no entry that voter could not apply: a release as lost
// is refused naming it, a registration is written without the worker's
// version, and no level is recorded. Once that voter runs this build, the
// leader records every voter's level and the same release is accepted;
// then a node of the old build may no longer join.
func TestRollingUpgradeGatesNewEntries(t *testing.T) {
	old := true
	c := clustertest.New(t, 3, func(i int, cfg *cluster.Config) {
		cfg.Version = "v-new"
		if i == 2 && old || i == 3 {
			cluster.SayLevel(cfg, fsm.BaseLevel)
			cfg.Version = "v-old"
		}
		cluster.AskLevelsEvery(cfg, 100*time.Millisecond)
	})
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 2, Version: "w-1.0"})
	run := spec("run", fsm.LostFail)
	do(t, c, &fsm.SubmitJob{Spec: run})
	g := acquire(t, c.Leader(), "w1", "r1")
	lost := &fsm.Release{WorkerID: "w1", JobID: "run", Token: g.Lease.Token, Reason: "command gone", Lost: true}

	// The leader has asked every voter (node-2 says level 2) and holds back.
	c.WaitFor(10*time.Second, "the leader to hear node-2 at level 2", func() bool {
		_, err := c.Leader().Apply(ctx(t), lost)
		var up *cluster.UpgradeError
		return errors.As(err, &up) && len(up.Nodes) == 1 && strings.HasPrefix(up.Nodes[0], "node-2 (level 2") && up.Need == 4
	})
	if w, err := c.Leader().FSM().Worker("w1"); err != nil || w.Version != "" {
		t.Fatalf("a registration with a version in a mixed cluster: %+v %v, want it written without", w, err)
	}
	for _, n := range c.Leader().FSM().Nodes() {
		if n.Level != 0 {
			t.Fatalf("a level recorded while node-2 cannot apply the record: %+v", n)
		}
	}

	// A backup holding a job that waits is snapshot version 5, which node-2
	// could not read: its restore is refused the same way, and nothing
	// changes.
	backup := fsm.New()
	data, err := fsm.Encode(time.Now().UnixNano(), &fsm.SubmitJob{Spec: spec("later", fsm.LostRequeue), RunAt: time.Now().Add(time.Hour).UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Apply(1, data); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	snap := backup.Snapshot()
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	_, err = c.Leader().RestoreSnapshot(ctx(t), &buf)
	var up *cluster.UpgradeError
	if !errors.As(err, &up) || up.Need != 5 || len(up.Nodes) != 1 || !strings.HasPrefix(up.Nodes[0], "node-2") {
		t.Fatalf("restore of a version-5 backup in a mixed cluster: %v, want UPGRADE_REQUIRED naming node-2", err)
	}
	if _, err := c.Leader().FSM().Job("later"); err == nil {
		t.Fatal("a refused restore changed the state")
	}

	// node-2 upgraded: every level is recorded, and the release goes through.
	old = false
	if err := c.Stop(2); err != nil {
		t.Fatal(err)
	}
	c.Restart(2)
	c.WaitFor(20*time.Second, "every voter's level recorded on every node", func() bool {
		for _, n := range c.Running() {
			nodes := n.FSM().Nodes()
			if len(nodes) != 3 {
				return false
			}
			for _, rec := range nodes {
				if rec.Level != fsm.Level || rec.Version != "v-new" {
					return false
				}
			}
		}
		return true
	})
	if members, err := c.Leader().Members(); err != nil || len(members) != 3 || members[2].Level != fsm.Level || members[2].Version != "v-new" {
		t.Fatalf("members %+v %v: want each with its level and version", members, err)
	}
	do(t, c, lost)
	j, err := c.Leader().FSM().Job("run")
	if err != nil || j.State != fsm.JobLost || j.Losses != 1 || j.Attempts != 0 {
		t.Fatalf("a run-style job released as lost: %+v %v", j, err)
	}
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 2, Version: "w-1.0"})
	if w, _ := c.Leader().FSM().Worker("w1"); w.Version != "w-1.0" {
		t.Fatalf("worker version %q once every voter applies it", w.Version)
	}

	// A node of the old build may not join a cluster at level 4: node-3
	// says level 2; its own join is refused, and so is an admin's.
	leader := c.Leader()
	joiner := c.Add()
	err = leader.AddNode(ctx(t), transport.NodeAddr{ID: "node-3", RaftAddr: joiner.Addr, APIAddr: joiner.APIAddr}, cluster.Actor{Name: "test"})
	if !errors.Is(err, cluster.ErrUpgradeRequired) || !strings.Contains(err.Error(), "node-3 (level 2)") {
		t.Fatalf("an old build's join: %v", err)
	}
	if members, err := leader.Members(); err != nil || len(members) != 3 {
		t.Fatalf("members after a refused join: %+v %v", members, err)
	}
}

// A voter added to a cluster whose levels are recorded is recorded with
// its level as it joins: the cluster's level never drops to 2 for the
// first asking after the join.
func TestJoinerRecordedWithItsLevel(t *testing.T) {
	c := clustertest.New(t, 3, func(_ int, cfg *cluster.Config) {
		cfg.Version = "v-new"
		cluster.AskLevelsEvery(cfg, time.Hour) // only the takeover's asking, and the join
	})
	leader := c.Leader()
	c.WaitFor(10*time.Second, "the three levels recorded", func() bool {
		n := 0
		for _, rec := range leader.FSM().Nodes() {
			if rec.Level == fsm.Level {
				n++
			}
		}
		return n == 3
	})
	joiner := c.Add()
	c.WaitFor(20*time.Second, "node-3 a voter, recorded with its level", func() bool {
		rec, ok := leader.FSM().Node("node-3")
		members, err := leader.Members()
		return err == nil && len(members) == 4 && ok && rec.Level == fsm.Level && rec.Version == "v-new"
	})
	_ = joiner
}

// Every proposal's level check and every submit ask the cluster's level:
// it reads Raft's configuration without a future, so it allocates nothing.
func TestClusterLevelAllocatesNothing(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	c.WaitFor(10*time.Second, "every voter recorded at this build's level", func() bool {
		return leader.ClusterLevel() == fsm.Level
	})
	// AllocsPerRun counts every goroutine's allocations, the cluster's too:
	// over 1,000 runs, it takes 1,000 of theirs to read as one of ours.
	if n := testing.AllocsPerRun(1000, func() { leader.ClusterLevel() }); n != 0 {
		t.Fatalf("ClusterLevel allocates %.0f times a call, want 0", n)
	}
}
