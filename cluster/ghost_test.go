package cluster_test

import (
	"errors"
	"testing"

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
