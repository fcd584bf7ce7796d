package fsm

import "testing"

// Counts follow what was applied: every command by type, every event by
// type, and reports by outcome, including a refused stale report (its
// event is recorded, the command counted).
func TestCountsFollowApplies(t *testing.T) {
	m := newMachine(t)
	m.register("w", 4)
	m.submit(spec("a"))
	m.submit(spec("b"))
	ga := m.acquireOne("w")
	m.report(ga, "r1", OutcomeSucceeded, false)
	gb := m.acquireOne("w")
	m.report(gb, "r2", OutcomeFailed, false)
	m.fail(&Report{WorkerID: "w", JobID: "a", Token: ga.Lease.Token, ReportID: "r3", Outcome: OutcomeFailed}, ErrConflict)

	c := m.f.Counts()
	want := map[CommandType]uint64{CmdRegisterWorker: 1, CmdSubmitJob: 2, CmdAcquire: 2, CmdReport: 3}
	for typ, n := range want {
		if c.Commands[typ] != n {
			t.Errorf("%s applied %d times, counted %d", typ, n, c.Commands[typ])
		}
	}
	if len(c.Commands) != len(want) {
		t.Errorf("commands counted %v", c.Commands)
	}
	if c.Events[EventJobSubmitted] != 2 || c.Events[EventLeaseAcquired] != 2 || c.Events[EventLeaseReported] != 2 ||
		c.Events[EventReportConflict] != 1 {
		t.Errorf("events counted %v", c.Events)
	}
	if c.Reports[OutcomeSucceeded] != 1 || c.Reports[OutcomeFailed] != 1 || len(c.Reports) != 2 {
		t.Errorf("reports counted %v", c.Reports)
	}
	if CmdSubmitJob.String() != "SubmitJob" || CommandType(250).String() != "command(250)" {
		t.Errorf("names %q %q", CmdSubmitJob, CommandType(250))
	}
}
