package cluster_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// A start, report or release naming a token above every grant is made up:
// refused as an invalid argument before it reaches the log, so it writes
// no event. One at or below the last grant may be late (its job compacted
// long ago, or never known to this cluster): refused as stale and kept as
// a lease.stale_report event.
func TestMadeUpTokensWriteNothing(t *testing.T) {
	c, _ := busyCluster(t)
	leader := c.Leader()
	st := leader.FSM().Stats()
	index := leader.Status().LastIndex
	for _, cmd := range []fsm.Command{
		&fsm.Report{WorkerID: "w", JobID: "never-existed", Token: st.LastToken + 1, ReportID: "x", Outcome: fsm.OutcomeSucceeded, Ref: "made-up"},
		&fsm.Report{WorkerID: "w", JobID: "j0", Token: 1 << 62, ReportID: "y", Outcome: fsm.OutcomeFailed},
		&fsm.Start{WorkerID: "w", JobID: "never-existed", Token: st.LastToken + 1000},
		&fsm.Release{WorkerID: "w", JobID: "j1", Token: st.LastToken + 1},
	} {
		if _, err := leader.Apply(ctx(t), cmd); !errors.Is(err, fsm.ErrInvalidArgument) {
			t.Fatalf("%T with a token never granted: %v", cmd, err)
		}
	}
	if leader.FSM().Stats().LastEventSeq != st.LastEventSeq || leader.Status().LastIndex != index {
		t.Fatal("a made-up token reached the log")
	}
	_, err := leader.Apply(ctx(t), &fsm.Report{WorkerID: "w", JobID: "never-existed", Token: st.LastToken,
		ReportID: "late", Outcome: fsm.OutcomeSucceeded, Ref: "commit-late"})
	if !errors.Is(err, fsm.ErrStaleToken) {
		t.Fatalf("a late report: %v", err)
	}
	evs := leader.FSM().Events(st.LastEventSeq, fsm.MaxPageSize).Events
	if len(evs) != 1 || evs[0].Type != fsm.EventStaleReport || evs[0].Ref != "commit-late" || evs[0].JobID != "never-existed" {
		t.Fatalf("events after a late report: %+v", evs)
	}
}

// Heartbeats and acquires from worker ids nobody registered are refused
// with ErrUnknownWorker (the client registers again on it) and never
// timed: no table entry, and no worker.unreachable event once they fall
// silent past grace and toleration.
func TestGhostWorkersAreNotTimed(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	c.WaitFor(10*time.Second, "every node in the node table", func() bool { return len(c.Leader().FSM().Nodes()) == 3 })
	leader = c.Leader()
	timed := leader.Status().WorkersTimed
	for i := range 2000 {
		if _, err := leader.Heartbeat(ctx(t), fmt.Sprintf("ghost-%d", i), nil); !errors.Is(err, fsm.ErrUnknownWorker) {
			t.Fatalf("heartbeat %d of a ghost: %v", i, err)
		}
	}
	for i := range 20 {
		req := fsm.Acquire{WorkerID: fmt.Sprintf("ghost-acquire-%d", i), RequestID: "r", Queues: []string{"default"}, Max: 1}
		if _, err := leader.Acquire(ctx(t), req, time.Second); !errors.Is(err, fsm.ErrUnknownWorker) {
			t.Fatalf("acquire of a ghost: %v", err)
		}
	}
	if got := leader.Status().WorkersTimed; got != timed {
		t.Fatalf("the leader times %d workers after the ghosts, %d before", got, timed)
	}
	c.Run(leader.Index, clustertest.Toleration+4*c.Tick(leader.Index))
	c.Converged()
	for _, ev := range leader.FSM().Events(0, fsm.MaxPageSize).Events {
		if strings.HasPrefix(ev.WorkerID, "ghost") {
			t.Fatalf("an event about a ghost: %+v", ev)
		}
	}
}
