package fsm

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// The rows of seed-leases.md that concern state, one test each, then the
// rules of SPEC section 3 that the seed does not spell out.

// "A worker dies during a run: the run fails as `worker lost`. It is not an
// attempt." "A worker dies during an evaluation: the evaluation is queued
// again. Partial output is never scored."
func TestSeedWorkerDies(t *testing.T) {
	for _, tc := range []struct {
		name      string
		policy    LostPolicy
		wantState JobState
		wantEvent EventType
	}{
		{"run", LostFail, JobLost, EventJobLost},
		{"evaluation", LostRequeue, JobQueued, EventJobRequeued},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			m.register("w1", 1)
			s := spec("job")
			s.OnWorkerLost = tc.policy
			m.submit(s)
			g := m.acquireOne("w1")
			m.do(&Start{WorkerID: "w1", JobID: "job", Token: g.Lease.Token})
			res := m.do(&Expire{Leases: []LeaseRef{{"job", g.Lease.Token}}, Reason: "silent past toleration"}).(ExpireResult)
			if len(res.Expired) != 1 {
				t.Fatalf("expired %v, want the lease", res)
			}
			j := m.job("job")
			if j.State != tc.wantState || j.Attempts != 0 {
				t.Fatalf("job %s attempts %d, want %s attempts 0", j.State, j.Attempts, tc.wantState)
			}
			if tc.policy == LostFail && j.Reason() != ReasonWorkerLost {
				t.Fatalf("reason %q, want %q", j.Reason(), ReasonWorkerLost)
			}
			if _, ok := m.lastEvent(tc.wantEvent); !ok {
				t.Fatalf("no %s event", tc.wantEvent)
			}
			// The lost attempt's output is never accepted.
			m.fail(&Report{WorkerID: "w1", JobID: "job", Token: g.Lease.Token, ReportID: "r1",
				Outcome: OutcomeSucceeded, Ref: "commit-partial"}, ErrStaleToken)
			if j := m.job("job"); j.State != tc.wantState {
				t.Fatalf("stale report moved the job to %s", j.State)
			}
			if tc.policy == LostRequeue {
				g2 := m.acquireOne("w1")
				if g2.Lease.Token <= g.Lease.Token {
					t.Fatalf("re-grant token %d not above %d", g2.Lease.Token, g.Lease.Token)
				}
			}
		})
	}
}

// "A late report: it is refused, and kept as a lease.stale_report event with
// the ref of its commits."
func TestSeedLateReport(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	m.register("w2", 1)
	m.submit(spec("job"))
	old := m.acquireOne("w1")
	m.do(&Expire{Leases: []LeaseRef{{"job", old.Lease.Token}}})
	cur := m.acquireOne("w2")
	m.fail(&Report{WorkerID: "w1", JobID: "job", Token: old.Lease.Token, ReportID: "late",
		Outcome: OutcomeSucceeded, Ref: "commit-abc"}, ErrStaleToken)
	ev, ok := m.lastEvent(EventStaleReport)
	if !ok || ev.Ref != "commit-abc" || ev.Token != old.Lease.Token || ev.JobID != "job" || ev.WorkerID != "w1" {
		t.Fatalf("stale report event %+v", ev)
	}
	// The current holder is unaffected and can still report.
	if r := m.report(cur, "r2", OutcomeSucceeded, false); r.State != JobReported {
		t.Fatalf("current report: %+v", r)
	}
	// A report naming a job that is not kept, with a token the cluster may
	// have granted, is stale too (the job may have been compacted).
	m.fail(&Report{WorkerID: "w1", JobID: "nope", Token: old.Lease.Token, ReportID: "x", Outcome: OutcomeFailed}, ErrStaleToken)
}

// A token above every grant was never anyone's: a start, report or release
// naming one is refused as invalid and records nothing (an event per
// made-up token would let any caller push real events out of the log). A
// token at or below the last grant may be a late report: it is refused as
// stale and kept as an event, even when its job was compacted long ago.
func TestMadeUpTokensRefused(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	m.submit(spec("job"))
	g := m.acquireOne("w1")
	m.report(g, "r", OutcomeSucceeded, false)
	last := m.f.Stats().LastToken
	events := m.f.Stats().LastEventSeq
	for _, c := range []Command{
		&Start{WorkerID: "w1", JobID: "job", Token: last + 1},
		&Report{WorkerID: "w1", JobID: "never", Token: last + 1, ReportID: "x", Outcome: OutcomeSucceeded, Ref: "made-up"},
		&Report{WorkerID: "w1", JobID: "job", Token: 1 << 63, ReportID: "y", Outcome: OutcomeFailed},
		&Release{WorkerID: "w1", JobID: "job", Token: math.MaxUint64},
	} {
		_, err := m.try(c)
		var fe *FieldError
		if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &fe) || fe.Field != "token" {
			t.Fatalf("%T with a token never granted: %v", c, err)
		}
	}
	if m.f.Stats().LastEventSeq != events {
		t.Fatal("a made-up token was recorded")
	}

	// The job is compacted; its worker's report arrives late.
	m.advance(10)
	m.do(&Compact{JobsBefore: m.now, Limit: 10})
	if _, err := m.f.Job("job"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("job not compacted: %v", err)
	}
	m.fail(&Report{WorkerID: "w1", JobID: "job", Token: g.Lease.Token, ReportID: "late", Outcome: OutcomeSucceeded, Ref: "commit-late"}, ErrStaleToken)
	if ev, ok := m.lastEvent(EventStaleReport); !ok || ev.Ref != "commit-late" || ev.JobID != "job" || ev.Token != g.Lease.Token {
		t.Fatalf("late report on a compacted job: %+v", ev)
	}
	// Tokens up to a raised floor may be the old cluster's (a restore): a
	// report with one is late, not made up.
	m.do(&RaiseTokenFloor{Floor: last + 100})
	m.fail(&Report{WorkerID: "w1", JobID: "old", Token: last + 50, ReportID: "z", Outcome: OutcomeSucceeded}, ErrStaleToken)
}

// "The same report twice: the second gets the first's answer." And a
// different report on a reported lease is a recorded conflict.
func TestSeedSameReportTwice(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	m.submit(spec("job"))
	g := m.acquireOne("w1")
	first := m.report(g, "r1", OutcomeFailed, true)
	if !first.Requeued || first.State != JobQueued {
		t.Fatalf("retryable failure: %+v", first)
	}
	// The job moves on (leased again) before the duplicate arrives.
	g2 := m.acquireOne("w1")
	again := m.report(g, "r1", OutcomeFailed, true)
	if again != first {
		t.Fatalf("second answer %+v, first %+v", again, first)
	}
	m.fail(&Report{WorkerID: "w1", JobID: "job", Token: g.Lease.Token, ReportID: "r-other",
		Outcome: OutcomeSucceeded}, ErrConflict)
	if _, ok := m.lastEvent(EventReportConflict); !ok {
		t.Fatal("conflict not recorded")
	}
	if j := m.job("job"); j.State != JobAcquired || j.Attempts != 1 {
		t.Fatalf("job %s attempts %d after duplicates", j.State, j.Attempts)
	}
	m.report(g2, "r2", OutcomeSucceeded, false)
}

// "The machine sleeps: nothing expires." The state machine has no clock:
// however far leader time jumps, leases end only by command.
func TestSeedTimeOnlyFromCommands(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 2)
	m.submit(spec("a"))
	g := m.acquireOne("w1")
	m.advance(365 * 24 * 3600 * 1e9)
	m.submit(spec("b"))
	if l, ok := m.job("a").CurrentLease(); !ok || l.Token != g.Lease.Token {
		t.Fatal("a lease ended without an expire command")
	}
}

// "`piloop serve` restarts: its worker finds its leases again." A restart is
// a restore; the worker lists its live leases, and only those.
func TestSeedRestartFindsLeases(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 3)
	for _, id := range []string{"a", "b", "c"} {
		m.submit(spec(id))
	}
	gs := m.acquire("w1", 3)
	m.report(gs[1], "r", OutcomeSucceeded, false)
	m.roundTrip()
	ls := m.f.WorkerLeases("w1")
	if len(ls) != 2 || ls[0].Token != gs[0].Lease.Token || ls[1].Token != gs[2].Lease.Token {
		t.Fatalf("leases after restart %+v", ls)
	}
	m.do(&Release{WorkerID: "w1", JobID: ls[0].JobID, Token: ls[0].Token, Reason: "cannot re-attach"})
	if j := m.job(ls[0].JobID); j.State != JobQueued || j.Attempts != 0 {
		t.Fatalf("released job %s attempts %d", j.State, j.Attempts)
	}
}

// The diagram: queued -> cancelled when the daemon stops first.
func TestSeedCancelBySubmitter(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	for _, id := range []string{"a", "b", "c", "d"} {
		s := spec(id)
		s.Submitter = "exec-1"
		m.submit(s)
	}
	other := spec("other")
	other.Submitter = "exec-2"
	m.submit(other)
	leased := m.acquireOne("w1") // "a": leased jobs are not cancelled by this call
	res := m.do(&CancelSubmitter{Submitter: "exec-1", Limit: 2}).(CancelSubmitterResult)
	if len(res.Cancelled) != 2 || res.Cancelled[0] != "b" || res.Cancelled[1] != "c" || res.Remaining != 1 {
		t.Fatalf("first call %+v", res)
	}
	res = m.do(&CancelSubmitter{Submitter: "exec-1", Limit: 2}).(CancelSubmitterResult)
	if len(res.Cancelled) != 1 || res.Remaining != 0 {
		t.Fatalf("second call %+v", res)
	}
	if j := m.job("other"); j.State != JobQueued {
		t.Fatalf("another submitter's job is %s", j.State)
	}
	if j := m.job(leased.Job.ID); j.State != JobAcquired {
		t.Fatalf("leased job is %s", j.State)
	}
}

func TestSubmitIdempotent(t *testing.T) {
	m := newMachine(t)
	first := m.do(&SubmitJob{Spec: spec("job")}).(SubmitResult)
	again := m.do(&SubmitJob{Spec: spec("job")}).(SubmitResult)
	if !first.Created || again.Created || again.Job.Seq != first.Job.Seq {
		t.Fatalf("first %+v again %+v", first, again)
	}
	other := spec("job")
	other.Priority = 9
	m.fail(&SubmitJob{Spec: other}, ErrConflict)
	if _, ok := m.lastEvent(EventSubmitConflict); !ok {
		t.Fatal("conflict not recorded")
	}
	if n := m.f.Stats().Jobs[JobQueued]; n != 1 {
		t.Fatalf("%d queued jobs", n)
	}
}

func TestAcquireOrderAndSelection(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 10)
	mk := func(id, queue, kind string, prio int32) {
		s := spec(id)
		s.Queue, s.Kind, s.Priority = queue, kind, prio
		m.submit(s)
	}
	mk("low-old", "default", "eval", 0)
	mk("high-young", "default", "eval", 5)
	mk("mid", "default", "run", 2)
	mk("high-younger", "default", "eval", 5)
	mk("elsewhere", "other", "eval", 100)

	// Kind filter first: only "run".
	g := m.do(&Acquire{WorkerID: "w1", RequestID: "k", Queues: []string{"default"}, Kinds: []string{"run"}, Max: 5}).(AcquireResult)
	if len(g.Grants) != 1 || g.Grants[0].Job.ID != "mid" {
		t.Fatalf("kind filter granted %+v", g.Grants)
	}
	g = m.do(&Acquire{WorkerID: "w1", RequestID: "all", Queues: []string{"default"}, Max: 5}).(AcquireResult)
	var got []string
	for _, gr := range g.Grants {
		got = append(got, gr.Job.ID)
	}
	want := []string{"high-young", "high-younger", "low-old"}
	if len(got) != len(want) {
		t.Fatalf("granted %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("granted %v, want %v", got, want)
		}
	}
	for i := 1; i < len(g.Grants); i++ {
		if g.Grants[i].Lease.Token <= g.Grants[i-1].Lease.Token {
			t.Fatal("tokens not increasing within one acquire")
		}
	}
}

func TestAcquireCapacityAndRequestID(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 2)
	for _, id := range []string{"a", "b", "c"} {
		m.submit(spec(id))
	}
	acq := &Acquire{WorkerID: "w1", RequestID: "same", Queues: []string{"default"}, Max: 5}
	first := m.do(acq).(AcquireResult)
	if len(first.Grants) != 2 {
		t.Fatalf("capacity 2 granted %d", len(first.Grants))
	}
	again := m.do(acq).(AcquireResult)
	if !again.Replayed || len(again.Grants) != 2 || again.Grants[0].Lease.Token != first.Grants[0].Lease.Token ||
		again.Grants[1].Lease.Token != first.Grants[1].Lease.Token {
		t.Fatalf("retry %+v, first %+v", again, first)
	}
	full := m.do(&Acquire{WorkerID: "w1", RequestID: "new", Queues: []string{"default"}, Max: 5}).(AcquireResult)
	if len(full.Grants) != 0 {
		t.Fatal("granted beyond capacity")
	}
	m.fail(&RegisterWorker{WorkerID: "w1", Capacity: 1}, ErrConflict)
	m.fail(&Acquire{WorkerID: "ghost", RequestID: "x", Queues: []string{"default"}, Max: 1}, ErrUnknownWorker)
}

// A repeated acquire answers with the first one's leases still kept, in
// token order: one whose job was compacted away is left out, and once
// none is kept the request id is free again. The request index keeps an
// acquire's first token, span and count of kept leases (state.go).
func TestReplayAnswersTheAcquiresKeptLeases(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 3)
	m.register("w2", 3)
	for _, id := range []string{"a", "b", "c", "d"} {
		m.submit(spec(id))
	}
	other := m.acquireOne("w2") // a token before the acquire's
	acq := &Acquire{WorkerID: "w1", RequestID: "r", Queues: []string{"default"}, Max: 3}
	first := m.do(acq).(AcquireResult)
	if len(first.Grants) != 3 || other.Lease.Token >= first.Grants[0].Lease.Token {
		t.Fatalf("first acquire: %d grants, the other's token %d", len(first.Grants), other.Lease.Token)
	}
	m.report(first.Grants[1], "r1", OutcomeSucceeded, false)
	m.advance(1)
	if res := m.do(&Compact{JobsBefore: m.now, EventsBefore: 0, Limit: 10}).(CompactResult); res.Jobs != 1 {
		t.Fatalf("compacted %d jobs, want the reported one", res.Jobs)
	}
	again := m.do(acq).(AcquireResult)
	if !again.Replayed || len(again.Grants) != 2 || again.Grants[0].Lease.Token != first.Grants[0].Lease.Token ||
		again.Grants[1].Lease.Token != first.Grants[2].Lease.Token || again.Grants[1].Job.ID != first.Grants[2].Job.ID {
		t.Fatalf("replay %+v, want the first and third of %+v", again, first)
	}
	m.report(first.Grants[0], "r0", OutcomeSucceeded, false)
	m.report(first.Grants[2], "r2", OutcomeSucceeded, false)
	m.advance(1)
	m.do(&Compact{JobsBefore: m.now, EventsBefore: 0, Limit: 10})
	m.submit(spec("e"))
	if fresh := m.do(acq).(AcquireResult); fresh.Replayed || len(fresh.Grants) != 1 || fresh.Grants[0].Job.ID != "e" {
		t.Fatalf("the request id once none of its leases is kept: %+v", fresh)
	}
}

// A lease pushed out of its job's history (MaxLeaseHistory) leaves the
// request index with it: its request id grants afresh, while a later
// acquire's, still kept, is replayed. The state's check finds an entry
// that miscounts its leases.
func TestRequestIndexFollowsTheHistory(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	m.submit(spec("a"))
	acquire := func(request string) AcquireResult {
		t.Helper()
		return m.do(&Acquire{WorkerID: "w1", RequestID: request, Queues: []string{"default"}, Max: 1}).(AcquireResult)
	}
	release := func(g Grant) { m.do(&Release{WorkerID: "w1", JobID: g.Job.ID, Token: g.Lease.Token}) }
	for i := range MaxLeaseHistory + 1 {
		res := acquire(fmt.Sprintf("r%d", i))
		if res.Replayed || len(res.Grants) != 1 {
			t.Fatalf("acquire %d: %+v", i, res)
		}
		release(res.Grants[0])
	}
	if j := m.job("a"); len(j.Leases()) != MaxLeaseHistory {
		t.Fatalf("job keeps %d leases", len(j.Leases()))
	}
	if again := acquire("r1"); !again.Replayed || len(again.Grants) != 1 || again.Grants[0].Lease.RequestID != "r1" {
		t.Fatalf("retry of a kept acquire: %+v", again)
	}
	fresh := acquire("r0")
	if fresh.Replayed || len(fresh.Grants) != 1 || fresh.Grants[0].Lease.Token <= uint64(MaxLeaseHistory+1) {
		t.Fatalf("retry of an acquire no longer kept: %+v", fresh)
	}
	s := m.f.st
	key := requestKey{"w1", "r0"}
	rt := s.requests[key]
	rt.kept++
	s.requests[key] = rt
	if err := s.check(); err == nil || !strings.Contains(err.Error(), "its entry counts 2") {
		t.Fatalf("check of a miscounted entry: %v", err)
	}
	rt.kept--
	s.requests[key] = rt
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

func TestReportOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		outcome   Outcome
		retryable bool
		attempts  uint32 // failed attempts before this report
		wantState JobState
	}{
		{"succeeded", OutcomeSucceeded, false, 0, JobReported},
		{"failed final", OutcomeFailed, false, 0, JobReported},
		{"failed retryable", OutcomeFailed, true, 0, JobQueued},
		{"retryable at max attempts", OutcomeFailed, true, 2, JobReported},
		{"cancelled", OutcomeCancelled, false, 0, JobReported},
		{"killed", OutcomeKilled, false, 0, JobReported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			m.register("w1", 1)
			m.submit(spec("job")) // MaxAttempts 3
			for i := uint32(0); i < tc.attempts; i++ {
				m.report(m.acquireOne("w1"), "fail", OutcomeFailed, true)
			}
			r := m.report(m.acquireOne("w1"), "final", tc.outcome, tc.retryable)
			j := m.job("job")
			if r.State != tc.wantState || j.State != tc.wantState {
				t.Fatalf("answer %s job %s, want %s", r.State, j.State, tc.wantState)
			}
			wantAttempts := tc.attempts
			if tc.outcome == OutcomeFailed {
				wantAttempts++
			}
			if j.Attempts != wantAttempts {
				t.Fatalf("attempts %d, want %d", j.Attempts, wantAttempts)
			}
			// Every report is an execution, whatever its outcome.
			if j.Executions() != tc.attempts+1 {
				t.Fatalf("executions %d, want %d", j.Executions(), tc.attempts+1)
			}
		})
	}
}

// Executions counts the executions that reached a report, from 1; a lost
// worker, a release and a queued cancel never count, and the first grant's
// LEASEHOLD_ATTEMPT (Attempts+1 at the grant) is the count its report
// leaves.
func TestExecutions(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	s := spec("job")
	s.MaxWorkerLosses = 5
	m.submit(s)
	if n := m.job("job").Executions(); n != 0 {
		t.Fatalf("queued job: %d executions", n)
	}
	g := m.acquireOne("w1")
	m.do(&Expire{Leases: []LeaseRef{{"job", g.Lease.Token}}}) // lost worker
	g = m.acquireOne("w1")
	m.do(&Release{WorkerID: "w1", JobID: "job", Token: g.Lease.Token})
	if n := m.job("job").Executions(); n != 0 {
		t.Fatalf("after a lost worker and a release: %d executions", n)
	}
	g = m.acquireOne("w1")
	m.report(g, "r1", OutcomeFailed, true)
	g = m.acquireOne("w1")
	if j := m.job("job"); j.Executions() != 1 || j.Attempts+1 != 2 {
		t.Fatalf("second execution running: %d executions, its attempt %d; want 1 and 2", j.Executions(), j.Attempts+1)
	}
	m.report(g, "r2", OutcomeSucceeded, false)
	m.roundTrip()
	if n := m.job("job").Executions(); n != 2 {
		t.Fatalf("succeeded on the second execution: %d executions, want 2", n)
	}

	m.submit(spec("never-run"))
	m.do(&Cancel{JobID: "never-run"})
	if n := m.job("never-run").Executions(); n != 0 {
		t.Fatalf("cancelled while queued: %d executions", n)
	}
}

func TestLeaseActionsRefused(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	m.register("w2", 1)
	m.submit(spec("job"))
	g := m.acquireOne("w1")
	tok := g.Lease.Token
	m.fail(&Start{WorkerID: "w2", JobID: "job", Token: tok}, ErrNotOwner)
	m.fail(&Report{WorkerID: "w2", JobID: "job", Token: tok, ReportID: "r", Outcome: OutcomeSucceeded}, ErrNotOwner)
	m.fail(&Release{WorkerID: "w2", JobID: "job", Token: tok}, ErrNotOwner)
	m.do(&Start{WorkerID: "w1", JobID: "job", Token: tok})
	m.do(&Start{WorkerID: "w1", JobID: "job", Token: tok}) // idempotent
	m.do(&Release{WorkerID: "w1", JobID: "job", Token: tok})
	m.fail(&Release{WorkerID: "w1", JobID: "job", Token: tok}, ErrStaleToken)
	if ev, ok := m.lastEvent(EventStaleAction); !ok || ev.Detail != "release" {
		t.Fatalf("stale release not recorded: %+v", ev)
	}
	m.fail(&Start{WorkerID: "w1", JobID: "job", Token: tok}, ErrStaleToken)
	if ev, ok := m.lastEvent(EventStaleAction); !ok || ev.Detail != "start" {
		t.Fatalf("stale start not recorded: %+v", ev)
	}
}

func TestCancelAndKill(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 3)
	for _, id := range []string{"queued", "leased", "killed"} {
		m.submit(spec(id))
	}
	gs := m.acquire("w1", 2) // "queued" and "leased" by age... pick by id below
	byID := map[string]Grant{}
	for _, g := range gs {
		byID[g.Job.ID] = g
	}
	// Age order granted "queued" and "leased"; "killed" is still queued.
	res := m.do(&Cancel{JobID: "killed", Reason: "user"}).(CancelResult)
	if res.Revoked || res.Job.State != JobCancelled {
		t.Fatalf("cancel of queued job: %+v", res)
	}
	m.do(&Cancel{JobID: "killed"}) // cancelling a cancelled job is idempotent

	res = m.do(&Cancel{JobID: "leased"}).(CancelResult)
	if !res.Revoked || res.Job.State != JobAcquired {
		t.Fatalf("cancel of leased job: %+v", res)
	}
	res = m.do(&Cancel{JobID: "leased", Kill: true}).(CancelResult)
	if l, _ := res.Job.CurrentLease(); l.Revoke != RevokeKill {
		t.Fatalf("kill did not upgrade the revoke: %v", l.Revoke)
	}
	m.do(&Cancel{JobID: "leased"}) // a cancel never downgrades a kill
	if l, _ := m.job("leased").CurrentLease(); l.Revoke != RevokeKill {
		t.Fatal("cancel downgraded a kill")
	}
	// The revoked job still reports.
	r := m.report(byID["leased"], "r", OutcomeKilled, false)
	if r.State != JobReported {
		t.Fatalf("revoked report: %+v", r)
	}
	// A retryable failure of a revoked job is not requeued.
	m.do(&Cancel{JobID: "queued"})
	if r := m.report(byID["queued"], "r", OutcomeFailed, true); r.Requeued {
		t.Fatal("revoked job requeued")
	}
	m.fail(&Cancel{JobID: "queued"}, ErrFinished)
	m.fail(&Cancel{JobID: "missing"}, ErrNotFound)
}

func TestRevokedLeaseEndsWithoutReport(t *testing.T) {
	for _, how := range []string{"expire", "release"} {
		t.Run(how, func(t *testing.T) {
			m := newMachine(t)
			m.register("w1", 1)
			m.submit(spec("job"))
			g := m.acquireOne("w1")
			m.do(&Cancel{JobID: "job"})
			if how == "expire" {
				m.do(&Expire{Leases: []LeaseRef{{"job", g.Lease.Token}}})
			} else {
				m.do(&Release{WorkerID: "w1", JobID: "job", Token: g.Lease.Token})
			}
			if j := m.job("job"); j.State != JobCancelled {
				t.Fatalf("revoked job after %s is %s, want cancelled", how, j.State)
			}
		})
	}
}

func TestPoisonJob(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	s := spec("poison")
	s.MaxWorkerLosses = 2
	m.submit(s)
	for i := 0; i < 2; i++ {
		g := m.acquireOne("w1")
		m.do(&Expire{Leases: []LeaseRef{{"poison", g.Lease.Token}}})
	}
	j := m.job("poison")
	if j.State != JobFailed || j.Reason() != ReasonPoison || j.Losses != 2 || j.Attempts != 0 {
		t.Fatalf("poison job: state %s reason %q losses %d attempts %d", j.State, j.Reason(), j.Losses, j.Attempts)
	}
}

func TestExpireIgnoresNonCurrent(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	m.register("w2", 1)
	m.submit(spec("job"))
	g1 := m.acquireOne("w1")
	m.report(g1, "r", OutcomeFailed, true) // requeued
	g2 := m.acquireOne("w2")
	res := m.do(&Expire{Leases: []LeaseRef{{"job", g1.Lease.Token}, {"ghost", 77}}}).(ExpireResult)
	if len(res.Expired) != 0 || len(res.Ignored) != 2 {
		t.Fatalf("expire of old tokens: %+v", res)
	}
	if l, ok := m.job("job").CurrentLease(); !ok || l.Token != g2.Lease.Token {
		t.Fatal("expire of an old token ended the current lease")
	}
}

func TestDeregisterReleasesLeases(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 2)
	m.submit(spec("a"))
	m.submit(spec("b"))
	gs := m.acquire("w1", 2)
	res := m.do(&DeregisterWorker{WorkerID: "w1"}).(DeregisterResult)
	if len(res.Released) != 2 {
		t.Fatalf("released %+v", res)
	}
	for _, g := range gs {
		if j := m.job(g.Job.ID); j.State != JobQueued {
			t.Fatalf("job %s is %s", g.Job.ID, j.State)
		}
	}
	m.fail(&DeregisterWorker{WorkerID: "w1"}, ErrUnknownWorker)
}

// Deregistered as lost, a worker's leases end as an expiry ends them: a
// loss counted, no attempt, then by each job's policy (a run-style job is
// lost, an evaluation queued again, a revoked one cancelled).
func TestDeregisterAsLostSettlesByPolicy(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 3)
	run := spec("run")
	run.OnWorkerLost = LostFail
	m.submit(run)
	m.submit(spec("eval"))
	m.submit(spec("revoked"))
	m.acquire("w1", 3)
	m.do(&Cancel{JobID: "revoked"})
	res := m.do(&DeregisterWorker{WorkerID: "w1", Lost: true}).(DeregisterResult)
	if len(res.Released) != 3 {
		t.Fatalf("ended %+v", res)
	}
	for id, want := range map[string]JobState{"run": JobLost, "eval": JobQueued, "revoked": JobCancelled} {
		j := m.job(id)
		if j.State != want || j.Losses != 1 || j.Attempts != 0 || j.Leases()[len(j.Leases())-1].State != LeaseExpired {
			t.Fatalf("job %s: %s, %d losses, %d attempts, lease %s; want %s, one loss, no attempt, expired",
				id, j.State, j.Losses, j.Attempts, j.Leases()[len(j.Leases())-1].State, want)
		}
	}
	if j := m.job("run"); j.Reason() != ReasonWorkerLost {
		t.Fatalf("run's reason %q", j.Reason())
	}
	if _, err := m.f.Worker("w1"); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("deregistered: %v", err)
	}
}

// A worker that finds an execution gone (its command vanished with the
// machine) settles its lease as lost: as an expiry would, by the job's
// policy, one loss and no attempt; a plain release queues the job with
// neither.
func TestReleaseAsLostSettlesByPolicy(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 3)
	run := spec("run")
	run.OnWorkerLost = LostFail
	m.submit(run)
	m.submit(spec("eval"))
	m.submit(spec("plain"))
	m.acquire("w1", 3)
	for _, id := range []string{"run", "eval"} {
		m.do(&Release{WorkerID: "w1", JobID: id, Token: firstToken(m.job(id)), Reason: "command gone", Lost: true})
	}
	m.do(&Release{WorkerID: "w1", JobID: "plain", Token: firstToken(m.job("plain"))})
	for id, want := range map[string]struct {
		state  JobState
		losses int
		lease  LeaseState
	}{"run": {JobLost, 1, LeaseExpired}, "eval": {JobQueued, 1, LeaseExpired}, "plain": {JobQueued, 0, LeaseReleased}} {
		j := m.job(id)
		if j.State != want.state || int(j.Losses) != want.losses || j.Attempts != 0 || j.Leases()[0].State != want.lease {
			t.Fatalf("job %s: %s, %d losses, %d attempts, lease %s; want %+v, no attempt", id, j.State, j.Losses, j.Attempts, j.Leases()[0].State, want)
		}
	}
	if j := m.job("run"); j.Reason() != ReasonWorkerLost {
		t.Fatalf("run's reason %q", j.Reason())
	}
	// The lease is over: the same release again is stale.
	if _, err := m.try(&Release{WorkerID: "w1", JobID: "run", Token: firstToken(m.job("run")), Lost: true}); !errors.Is(err, ErrStaleToken) && !errors.Is(err, ErrFinished) {
		t.Fatalf("a second release as lost: %v", err)
	}
}

// The leader removes a worker it has not heard from for long with
// RemoveIdle. One that holds a live lease (an acquire that committed after
// the leader decided) or is not registered is kept, and never loses a
// lease; each removal is one event.
func TestRemoveIdleKeepsHolders(t *testing.T) {
	m := newMachine(t)
	m.register("idle", 1)
	m.register("busy", 1)
	m.submit(spec("job"))
	g := m.acquireOne("busy")
	events := m.f.Stats().LastEventSeq
	res := m.do(&RemoveIdle{WorkerIDs: []string{"idle", "busy", "ghost"}, Reason: "silent past 1h0m0s"}).(RemoveIdleResult)
	if fmt.Sprint(res.Removed) != "[idle]" || fmt.Sprint(res.Kept) != "[busy ghost]" {
		t.Fatalf("removed %v kept %v", res.Removed, res.Kept)
	}
	ev, ok := m.lastEvent(EventWorkerDeregistered)
	if m.f.Stats().LastEventSeq != events+1 || !ok || ev.WorkerID != "idle" || ev.Detail != "silent past 1h0m0s" {
		t.Fatalf("events after a removal: %+v", ev)
	}
	if _, err := m.f.Worker("idle"); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("removed worker: %v", err)
	}
	if j := m.job("job"); j.State != JobAcquired || j.Leases()[0].Token != g.Lease.Token {
		t.Fatalf("a holder's lease changed: %+v", j)
	}
	// Told twice (a retried proposal), nothing more happens.
	if res := m.do(&RemoveIdle{WorkerIDs: []string{"idle"}}).(RemoveIdleResult); len(res.Removed) != 0 || m.f.Stats().LastEventSeq != events+1 {
		t.Fatalf("a second removal: %+v", res)
	}
	m.roundTrip()
}

// The worker table is bounded: a new worker beyond MaxWorkers is refused
// with a message that says what to do; a registered one may register again.
func TestWorkerTableBound(t *testing.T) {
	if testing.Short() {
		t.Skip("fills the worker table")
	}
	f := New()
	for i := range MaxWorkers {
		if _, err := f.Apply(uint64(i+1), mustEncode(t, &RegisterWorker{WorkerID: fmt.Sprintf("w%d", i), Capacity: 1})); err != nil {
			t.Fatal(err)
		}
	}
	_, err := f.Apply(MaxWorkers+1, mustEncode(t, &RegisterWorker{WorkerID: "one-more", Capacity: 1}))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "worker table is full") {
		t.Fatalf("a worker beyond the bound: %v", err)
	}
	if _, err := f.Apply(MaxWorkers+2, mustEncode(t, &RegisterWorker{WorkerID: "w7", Capacity: 2})); err != nil {
		t.Fatalf("a registered worker registering again: %v", err)
	}
	if err := f.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestCompaction(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	for _, id := range []string{"a", "b", "c"} {
		m.submit(spec(id))
		m.report(m.acquireOne("w1"), "r-"+id, OutcomeSucceeded, false)
		m.advance(10)
	}
	m.submit(spec("open"))
	cutoff := m.now - 15 // a and b finished before it, c after
	res := m.do(&Compact{JobsBefore: cutoff, EventsBefore: cutoff, Limit: 1}).(CompactResult)
	if res.Jobs != 1 || !res.More {
		t.Fatalf("first compaction %+v", res)
	}
	res = m.do(&Compact{JobsBefore: cutoff, EventsBefore: cutoff, Limit: 10}).(CompactResult)
	if res.Jobs != 1 || res.More {
		t.Fatalf("second compaction %+v", res)
	}
	for id, want := range map[string]bool{"a": false, "b": false, "c": true, "open": true} {
		if _, err := m.f.Job(id); (err == nil) != want {
			t.Fatalf("job %s kept=%t, want %t", id, err == nil, want)
		}
	}
	page := m.f.Events(0, MaxPageSize)
	if !page.Truncated || page.Events[0].Time < cutoff {
		t.Fatalf("events not compacted: first %+v truncated %t", page.Events[0], page.Truncated)
	}
	// A compacted job id can be submitted again as a new job.
	if r := m.do(&SubmitJob{Spec: spec("a")}).(SubmitResult); !r.Created {
		t.Fatal("resubmission after compaction was not created")
	}
}

func TestTokenFloor(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	m.submit(spec("a"))
	g := m.acquireOne("w1")
	res := m.do(&RaiseTokenFloor{Floor: 1000}).(FloorResult)
	if res.Next != 1001 {
		t.Fatalf("next %d", res.Next)
	}
	m.do(&RaiseTokenFloor{Floor: 5}) // never lowers
	m.report(g, "r", OutcomeFailed, true)
	if g2 := m.acquireOne("w1"); g2.Lease.Token != 1001 {
		t.Fatalf("token after floor %d, want 1001", g2.Lease.Token)
	}
	m.fail(&RaiseTokenFloor{Floor: MaxTokenFloor + 1}, ErrInvalidArgument)
}

func TestRecordEvent(t *testing.T) {
	m := newMachine(t)
	ev := m.do(&RecordEvent{Event: EventAbsenceRule, Detail: "gap 12s"}).(Event)
	if ev.Type != EventAbsenceRule || ev.Seq == 0 {
		t.Fatalf("recorded %+v", ev)
	}
	m.fail(&RecordEvent{Event: EventLeaseExpired}, ErrInvalidArgument)
}

func TestFence(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	m.submit(spec("job"))
	g := m.acquireOne("w1")
	if r := m.f.Fence("job", g.Lease.Token); !r.Current {
		t.Fatalf("fence of live token %+v", r)
	}
	m.do(&Expire{Leases: []LeaseRef{{"job", g.Lease.Token}}})
	g2 := m.acquireOne("w1")
	if r := m.f.Fence("job", g.Lease.Token); r.Current || r.CurrentToken != g2.Lease.Token {
		t.Fatalf("fence of old token %+v", r)
	}
	if r := m.f.Fence("nope", 1); r.Current || r.State != 0 {
		t.Fatalf("fence of unknown job %+v", r)
	}
}

func TestApplyRefusesReplayedIndex(t *testing.T) {
	f := New()
	data, err := Encode(1, &RegisterWorker{WorkerID: "w", Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Apply(5, data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Apply(5, data); !errors.Is(err, ErrOutOfOrder) || !IsFatal(err) {
		t.Fatalf("replayed index: %v", err)
	}
}

// HasJob agrees with Job, through a submit, a compaction and a restore.
func TestHasJob(t *testing.T) {
	m := newMachine(t)
	if m.f.HasJob("j") {
		t.Fatal("an empty state has job j")
	}
	m.submit(spec("j"))
	m.roundTrip()
	_, err := m.f.Job("j")
	if !m.f.HasJob("j") || err != nil || m.f.HasJob("k") {
		t.Fatalf("HasJob(j) %t (Job: %v), HasJob(k) %t", m.f.HasJob("j"), err, m.f.HasJob("k"))
	}
}

// firstToken is the token of the job's first lease.
func firstToken(j Job) uint64 { return j.Leases()[0].Token }
