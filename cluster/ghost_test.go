package cluster_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
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

// A registered worker the leader has not heard from for WorkerGCThreshold
// and that holds nothing is removed, with one event, once; a holder's lease
// expires first, then it is removed alike. (The state machine keeps a
// worker that still holds a lease when the removal applies:
// fsm TestRemoveIdleKeepsHolders.) A removed worker is told UNKNOWN_WORKER
// and may register again.
func TestIdleWorkersAreRemoved(t *testing.T) {
	const gc = 3 * clustertest.Toleration
	c := clustertest.New(t, 3, func(_ int, cfg *cluster.Config) { cfg.WorkerGCThreshold = gc })
	c.WaitFor(10*time.Second, "every node in the node table", func() bool { return len(c.Leader().FSM().Nodes()) == 3 })
	leader := c.Leader()
	for _, w := range []string{"idle", "holder-a", "witness"} {
		do(t, c, &fsm.RegisterWorker{WorkerID: w, Capacity: 1})
	}
	do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostRequeue)})
	acquire(t, leader, "holder-a", "r1")

	removed := func(w string) int {
		n := 0
		for _, ev := range leader.FSM().Events(0, fsm.MaxPageSize).Events {
			if ev.Type == fsm.EventWorkerDeregistered && ev.WorkerID == w {
				n++
			}
		}
		return n
	}
	runWithWitness(t, c, leader, gc-clustertest.Toleration)
	if removed("idle") != 0 || removed("holder-a") != 0 {
		t.Fatal("a worker was removed before the threshold")
	}
	runWithWitness(t, c, leader, clustertest.Toleration+4*c.Tick(leader.Index))
	c.WaitFor(5*time.Second, "the idle workers' removal", func() bool { return removed("idle") == 1 && removed("holder-a") == 1 })
	// Another threshold later: nothing more.
	runWithWitness(t, c, leader, gc)
	c.Converged()
	for w, want := range map[string]int{"idle": 1, "holder-a": 1, "witness": 0} {
		if got := removed(w); got != want {
			t.Errorf("%s: removed %d times, want %d", w, got, want)
		}
	}
	if _, err := leader.Heartbeat(ctx(t), "idle", nil); !errors.Is(err, fsm.ErrUnknownWorker) {
		t.Fatalf("heartbeat of a removed worker: %v", err)
	}
	do(t, c, &fsm.RegisterWorker{WorkerID: "idle", Capacity: 1})
	heartbeat(t, leader, "idle")
}

// MaxWorkers bounds the registered workers below the state machine's own
// bound: a new worker beyond it is refused, one already registered may
// register again.
func TestMaxWorkers(t *testing.T) {
	c := clustertest.New(t, 1, func(_ int, cfg *cluster.Config) { cfg.MaxWorkers = 2 })
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 1})
	do(t, c, &fsm.RegisterWorker{WorkerID: "w2", Capacity: 1})
	if _, err := c.Leader().Apply(ctx(t), &fsm.RegisterWorker{WorkerID: "w3", Capacity: 1}); !errors.Is(err, fsm.ErrTooLarge) ||
		!strings.Contains(err.Error(), "max_workers") {
		t.Fatalf("a worker beyond max_workers: %v", err)
	}
	do(t, c, &fsm.RegisterWorker{WorkerID: "w2", Capacity: 3})
	if n := c.Leader().FSM().WorkerCount(); n != 2 {
		t.Fatalf("%d workers registered", n)
	}
}
