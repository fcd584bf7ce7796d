package fsm

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// timedSpec is a job with a 10 s timeout's spec and a retry policy of 1 s
// doubling; submitTimed submits it.
func timedSpec(id string, attempts uint32) JobSpec {
	s := spec(id)
	s.MaxAttempts = attempts
	s.Retry = &RetryPolicy{Initial: int64(time.Second), Max: int64(time.Minute), Multiplier: 2000}
	return s
}

const tenSeconds = int64(10 * time.Second)

func (m *machine) submitTimed(id string, attempts uint32) {
	m.t.Helper()
	m.do(&SubmitJob{Spec: timedSpec(id, attempts), TimeoutMs: 10_000})
}

// timeOut proposes a TimeOut of the lease at the machine's time.
func (m *machine) timeOut(g Grant) TimeOutResult {
	m.t.Helper()
	return m.do(&TimeOut{Leases: []LeaseRef{{g.Job.ID, g.Lease.Token}}}).(TimeOutResult)
}

// TestTimeoutRevokesAtItsDeadline: the leader's index lists a lease only
// once its deadline (the grant plus the timeout) has passed; apply ignores
// a TimeOut proposed early; the revoke is a kill the lease records as a
// timeout; the worker's report (of any outcome) ends the attempt timed
// out, counted, and the retry policy queues the job after its backoff; the
// next grant has a larger token.
func TestTimeoutRevokesAtItsDeadline(t *testing.T) {
	m := newMachine(t)
	m.register("w", 4)
	m.submitTimed("slow", 3)
	g := m.acquireOne("w")
	deadline := g.Lease.GrantedAt + tenSeconds
	if at, ok := m.f.NextTimeoutAfter(m.now); !ok || at != deadline {
		t.Fatalf("NextTimeoutAfter: %d %t, want %d", at, ok, deadline)
	}
	m.advance(9 * int64(time.Second))
	if got := m.f.TimedOut(m.now, 10); len(got) != 0 {
		t.Fatalf("timed out after 9 s: %v", got)
	}
	// The leader's judgement is not trusted: too early, nothing happens.
	if res := m.timeOut(g); len(res.TimedOut) != 0 || len(res.Ignored) != 1 {
		t.Fatalf("early TimeOut: %+v", res)
	}
	if l, _ := m.job("slow").CurrentLease(); l.Revoke != RevokeNone {
		t.Fatalf("revoked early: %v", l.Revoke)
	}
	m.now = deadline
	if got := m.f.TimedOut(m.now, 10); len(got) != 1 || got[0].Token != g.Lease.Token {
		t.Fatalf("TimedOut at the deadline: %v", got)
	}
	if res := m.timeOut(g); len(res.TimedOut) != 1 {
		t.Fatalf("TimeOut at the deadline: %+v", res)
	}
	if l, _ := m.job("slow").CurrentLease(); l.Revoke != RevokeTimeout || !l.Revoke.Kills() {
		t.Fatalf("lease revoke %v, want timeout", l.Revoke)
	}
	if ev, ok := m.lastEvent(EventLeaseTimedOut); !ok || ev.Token != g.Lease.Token {
		t.Fatalf("no lease.timed_out event: %+v", ev)
	}
	if got := m.f.TimedOut(m.now, 10); len(got) != 0 {
		t.Fatalf("still listed after its timeout: %v", got)
	}
	// A second TimeOut of the same lease changes nothing.
	if res := m.timeOut(g); len(res.TimedOut) != 0 {
		t.Fatalf("timed out twice: %+v", res)
	}
	m.roundTrip() // the revoked lease survives a snapshot

	res := m.report(g, "r1", OutcomeKilled, false)
	j := m.job("slow")
	l := j.Leases()[len(j.Leases())-1]
	if !res.Requeued || j.State != JobQueued || j.Attempts != 1 || l.Outcome != OutcomeTimedOut || j.Executions() != 1 {
		t.Fatalf("after the report: %+v; job %s attempts %d executions %d, lease outcome %v",
			res, j.State, j.Attempts, j.Executions(), l.Outcome)
	}
	if j.NotBefore != m.now+int64(time.Second) {
		t.Fatalf("queued again not before now+%s, want the policy's 1s", time.Duration(j.NotBefore-m.now))
	}
	if got := m.acquire("w", 1); len(got) != 0 {
		t.Fatal("granted before the backoff")
	}
	m.advance(int64(time.Second))
	g2 := m.acquireOne("w")
	if g2.Lease.Token <= g.Lease.Token {
		t.Fatalf("token %d after %d", g2.Lease.Token, g.Lease.Token)
	}
	if err := m.f.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestTimeoutEndsEveryWay: a timed-out lease counts an attempt however it
// ends (a success reported late, a release, an expiry), never a loss; a
// lease that expires without a timeout stays a loss; a job out of attempts
// ends; a run-style job whose timed-out lease expires ends lost.
func TestTimeoutEndsEveryWay(t *testing.T) {
	m := newMachine(t)
	m.register("w", 8)
	timeOutNow := func(id string) Grant {
		t.Helper()
		g := m.acquireOne("w")
		if g.Job.ID != id {
			t.Fatalf("granted %s, want %s", g.Job.ID, id)
		}
		m.advance(tenSeconds)
		if res := m.timeOut(g); len(res.TimedOut) != 1 {
			t.Fatalf("%s: not timed out: %+v", id, res)
		}
		return g
	}

	m.submitTimed("late-success", 3)
	g := timeOutNow("late-success")
	m.report(g, "r", OutcomeSucceeded, false)
	if j := m.job("late-success"); j.State != JobQueued || j.Attempts != 1 {
		t.Fatalf("a success after the timeout: %s attempts %d, want queued again after 1", j.State, j.Attempts)
	}
	m.do(&Cancel{JobID: "late-success"})

	m.submitTimed("released", 3)
	g = timeOutNow("released")
	m.do(&Release{WorkerID: "w", JobID: g.Job.ID, Token: g.Lease.Token, Reason: "shutdown"})
	if j := m.job("released"); j.State != JobQueued || j.Attempts != 1 || j.Losses != 0 {
		t.Fatalf("released after the timeout: %s attempts %d losses %d", j.State, j.Attempts, j.Losses)
	}
	m.do(&Cancel{JobID: "released"})

	m.submitTimed("expired", 3)
	g = timeOutNow("expired")
	m.do(&Expire{Leases: []LeaseRef{{g.Job.ID, g.Lease.Token}}, Reason: "silent"})
	j := m.job("expired")
	if j.State != JobQueued || j.Attempts != 1 || j.Losses != 0 || j.Leases()[0].Outcome != OutcomeTimedOut {
		t.Fatalf("expired after the timeout: %s attempts %d losses %d outcome %v", j.State, j.Attempts, j.Losses, j.Leases()[0].Outcome)
	}
	m.do(&Cancel{JobID: "expired"})

	m.submitTimed("lost", 3)
	g = m.acquireOne("w")
	m.do(&Expire{Leases: []LeaseRef{{g.Job.ID, g.Lease.Token}}, Reason: "silent"})
	if j := m.job("lost"); j.State != JobQueued || j.Attempts != 0 || j.Losses != 1 {
		t.Fatalf("expired without a timeout: %s attempts %d losses %d, want a loss, no attempt", j.State, j.Attempts, j.Losses)
	}
	m.do(&Cancel{JobID: "lost"})

	m.submitTimed("once", 1)
	g = timeOutNow("once")
	m.report(g, "r", OutcomeKilled, false)
	if j := m.job("once"); j.State != JobReported || j.Attempts != 1 || j.Reason() == "" {
		t.Fatalf("out of attempts: %s attempts %d reason %q", j.State, j.Attempts, j.Reason())
	}

	run := timedSpec("run-style", 3)
	run.OnWorkerLost = LostFail
	m.do(&SubmitJob{Spec: run, TimeoutMs: 10_000})
	g = timeOutNow("run-style")
	m.do(&Expire{Leases: []LeaseRef{{g.Job.ID, g.Lease.Token}}, Reason: "silent"})
	if j := m.job("run-style"); j.State != JobLost || j.Attempts != 1 {
		t.Fatalf("run-style, expired after its timeout: %s attempts %d, want lost after 1", j.State, j.Attempts)
	}
	if err := m.f.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestCancelWinsOverTimeout: a cancelled lease never times out, and a
// cancel of a timed-out lease ends the job cancelled, not retried.
func TestCancelWinsOverTimeout(t *testing.T) {
	m := newMachine(t)
	m.register("w", 4)
	m.submitTimed("a", 3)
	ga := m.acquireOne("w")
	m.do(&Cancel{JobID: "a"})
	m.advance(tenSeconds)
	if got := m.f.TimedOut(m.now, 10); len(got) != 0 {
		t.Fatalf("a cancelled lease listed as timed out: %v", got)
	}
	if res := m.timeOut(ga); len(res.TimedOut) != 0 {
		t.Fatalf("a cancelled lease timed out: %+v", res)
	}

	m.submitTimed("b", 3)
	gb := m.acquireOne("w")
	m.advance(tenSeconds)
	m.timeOut(gb)
	m.do(&Cancel{JobID: "b"})
	if l, _ := m.job("b").CurrentLease(); l.Revoke != RevokeKill {
		t.Fatalf("cancel of a timed-out lease: revoke %v, want kill", l.Revoke)
	}
	m.do(&Release{WorkerID: "w", JobID: "b", Token: gb.Lease.Token})
	if j := m.job("b"); j.State != JobCancelled || j.Attempts != 0 {
		t.Fatalf("cancelled after its timeout: %s attempts %d", j.State, j.Attempts)
	}
	if err := m.f.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestResubmitIgnoresTimeout: the timeout is how to run a job, not what
// it is.
func TestResubmitIgnoresTimeout(t *testing.T) {
	m := newMachine(t)
	m.do(&SubmitJob{Spec: spec("a")})
	res := m.do(&SubmitJob{Spec: spec("a"), TimeoutMs: 60_000}).(SubmitResult)
	if res.Created || res.Job.TimeoutMs != 0 {
		t.Fatalf("resubmit with a timeout: %+v, want the first job as it was", res)
	}
}

// TestTimeoutNeedsCodec6: a submit with a timeout and a TimeOut are
// written in codec version 6 (no older node may apply them), one without
// as before.
func TestTimeoutNeedsCodec6(t *testing.T) {
	for _, c := range []struct {
		cmd  Command
		want byte
	}{
		{&SubmitJob{Spec: spec("a")}, codecV2},
		{&SubmitJob{Spec: spec("a"), TimeoutMs: 1000}, codecV6},
		{&TimeOut{Leases: []LeaseRef{{"a", 1}}}, codecV6},
	} {
		if got := CodecOf(c.cmd); got != c.want {
			t.Errorf("%+v: codec %d, want %d", c.cmd, got, c.want)
		}
	}
}

// TestSnapshotKeepsTimeouts: a state with a timeout is written in snapshot
// version 6 whatever the nodes' levels, keeps the timeout, and rebuilds the
// deadline index; a version 5 stream never carries one.
func TestSnapshotKeepsTimeouts(t *testing.T) {
	m := newMachine(t)
	m.register("w", 4)
	m.submitTimed("a", 3)
	m.submitTimed("b", 3)
	g := m.acquireOne("w")
	var buf bytes.Buffer
	snap := m.f.Snapshot()
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if v, err := SnapshotVersion(bytes.NewReader(buf.Bytes())); err != nil || v != 6 {
		t.Fatalf("snapshot version %d %v, want 6", v, err)
	}
	m.roundTrip()
	if j := m.job("b"); j.TimeoutMs != 10_000 {
		t.Fatalf("timeout after the round trip: %d ms", j.TimeoutMs)
	}
	if got := m.f.TimedOut(g.Lease.GrantedAt+tenSeconds, 10); len(got) != 1 || got[0].Token != g.Lease.Token {
		t.Fatalf("restored index: %v", got)
	}
	if err := m.f.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestTimeoutHeapDropsEndedLeases: leases that end before their deadline
// leave no entries behind for long, even while an earlier deadline keeps
// them from the top of the heap.
func TestTimeoutHeapDropsEndedLeases(t *testing.T) {
	m := newMachine(t)
	m.register("w", 4)
	m.do(&SubmitJob{Spec: spec("near"), TimeoutMs: MinTimeout})
	m.acquireOne("w")
	for i := range 500 {
		id := fmt.Sprintf("j%d", i)
		m.submitTimed(id, 3)
		g := m.acquireOne("w")
		m.report(g, "r", OutcomeSucceeded, false)
	}
	if n, live := len(m.f.st.timeouts.items), m.f.st.timeouts.live; live != 1 || n > 64+2*live {
		t.Fatalf("timeout heap: %d entries for %d live lease", n, live)
	}
	if err := m.f.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
