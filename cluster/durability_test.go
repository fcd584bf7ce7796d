package cluster_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// Restarting one node, then the whole cluster, from disk: every
// acknowledged write survives, tokens keep growing, and the replicas
// converge. On three nodes and on five.
func TestRestartFromDisk(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d-nodes", size), func(t *testing.T) {
			c := clustertest.New(t, size)
			do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 100})
			var acked []string
			submit := func(n int) {
				for range n {
					id := fmt.Sprintf("job-%03d", len(acked))
					do(t, c, &fsm.SubmitJob{Spec: spec(id, fsm.LostRequeue)})
					acked = append(acked, id)
				}
			}
			submit(20)
			g := acquire(t, c.Leader(), "w", "before")

			// One follower down while writes go on, then back.
			follower := (c.Leader().Index + 1) % size
			c.Kill(follower)
			submit(20)
			c.Restart(follower)
			c.Converged()

			// Everyone down, everyone back: a cold start is a takeover.
			lastToken := c.Leader().FSM().Stats().LastToken
			for i := range c.Nodes {
				c.Kill(i)
			}
			for i := range c.Nodes {
				c.Restart(i)
			}
			leader := c.Leader()
			for _, id := range acked {
				if _, err := leader.FSM().Job(id); err != nil {
					t.Fatalf("acknowledged job %s lost: %v", id, err)
				}
			}
			if st := leader.FSM().Stats(); st.LastToken != lastToken {
				t.Fatalf("token counter %d after restart, was %d", st.LastToken, lastToken)
			}
			if liveToken(leader, g.Job.ID) != g.Lease.Token {
				t.Fatal("a live lease did not survive the restart")
			}
			if st := leader.Status(); st.WorkersTimed != 1 {
				t.Fatalf("cold-started leader times %d workers, want 1", st.WorkersTimed)
			}
			g2 := acquire(t, leader, "w", "after")
			if g2.Lease.Token <= lastToken {
				t.Fatalf("token %d after restart, counter was %d", g2.Lease.Token, lastToken)
			}
			c.Converged()
		})
	}
}

// An operator's snapshot restore raises the token floor above anything the
// old cluster could have granted since the backup.
func TestSnapshotRestoreRaisesFloor(t *testing.T) {
	c := clustertest.New(t, 3)
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 10})
	for i := range 3 {
		do(t, c, &fsm.SubmitJob{Spec: spec(fmt.Sprintf("j%d", i), fsm.LostRequeue)})
	}
	leader := c.Leader()
	g := acquire(t, leader, "w", "r1")
	var backup bytes.Buffer
	if _, err := leader.SaveSnapshot(ctx(t), &backup); err != nil {
		t.Fatal(err)
	}
	// After the backup the old cluster grants more.
	later := acquire(t, leader, "w", "r2")

	st, err := leader.RestoreSnapshot(ctx(t), bytes.NewReader(backup.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if st.LastToken <= later.Lease.Token {
		t.Fatalf("floor %d not above the token %d granted after the backup", st.LastToken, later.Lease.Token)
	}
	leader = c.Leader()
	if liveToken(leader, g.Job.ID) != g.Lease.Token || liveToken(leader, later.Job.ID) != 0 {
		t.Fatal("restored state is not the backup's")
	}
	g3 := acquire(t, leader, "w", "r3")
	if g3.Lease.Token <= later.Lease.Token {
		t.Fatalf("grant after restore %d, old cluster granted %d", g3.Lease.Token, later.Lease.Token)
	}
	c.Converged()

	if _, err := leader.RestoreSnapshot(ctx(t), bytes.NewReader(backup.Bytes()[:100])); err == nil {
		t.Fatal("a truncated snapshot was restored")
	}
}
