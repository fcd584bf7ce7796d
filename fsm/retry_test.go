package fsm

import (
	"fmt"
	"testing"
	"time"
)

func TestRetryDelayGrowsToItsCap(t *testing.T) {
	p := &RetryPolicy{Initial: int64(time.Second), Max: int64(10 * time.Second), Multiplier: 2000}
	want := []time.Duration{1, 2, 4, 8, 10, 10, 10}
	for i, w := range want {
		if got := time.Duration(p.retryDelay("job", uint32(i+1))); got != w*time.Second {
			t.Errorf("attempt %d: delay %s, want %s", i+1, got, w*time.Second)
		}
	}
	// The largest policy never overflows, however many attempts.
	big := &RetryPolicy{Initial: MaxRetryDelay, Max: MaxRetryDelay, Multiplier: MaxRetryMultiplier}
	if got := big.retryDelay("job", MaxAttempts); got != MaxRetryDelay {
		t.Errorf("largest policy: %d, want %d", got, MaxRetryDelay)
	}
}

func TestRetryJitterIsDerivedAndBounded(t *testing.T) {
	p := &RetryPolicy{Initial: int64(10 * time.Second), Max: int64(10 * time.Second), Multiplier: 1000, Jitter: 50}
	seen := map[int64]bool{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		d := p.retryDelay(id, 1)
		if d != p.retryDelay(id, 1) {
			t.Fatalf("job %s: two delays for one attempt", id)
		}
		if d < p.Initial/2 || d > p.Initial {
			t.Errorf("job %s: delay %s outside [5s, 10s]", id, time.Duration(d))
		}
		seen[d] = true
	}
	if len(seen) < 4 {
		t.Errorf("six jobs got %d distinct delays: jitter does not spread them", len(seen))
	}
}

// TestDelayedJobWaitsForItsTime: a job submitted to run later is not
// granted before the leader time reaches it, is counted by ReadyAt for a
// parked acquire at that time, and is granted by the first acquire at it;
// a retryable failure waits out the policy's delay.
func TestDelayedJobWaitsForItsTime(t *testing.T) {
	m := newMachine(t)
	m.register("w", 4)
	runAt := m.now + int64(time.Minute)
	m.do(&SubmitJob{Spec: spec("later"), RunAt: runAt})
	if ev, ok := m.lastEvent(EventJobScheduled); !ok || ev.JobID != "later" {
		t.Fatalf("no scheduled event: %+v", ev)
	}
	if got := m.acquire("w", 1); len(got) != 0 {
		t.Fatalf("granted %s a minute early", got[0].Job.ID)
	}
	q := []string{"default"}
	if n := m.f.Ready(q, nil); n != 0 {
		t.Fatalf("Ready %d before its time", n)
	}
	if n := m.f.ReadyAt(q, nil, runAt); n != 1 {
		t.Fatalf("ReadyAt its time: %d, want 1", n)
	}
	if at, ok := m.f.NextDueAfter(m.now); !ok || at != runAt {
		t.Fatalf("NextDueAfter(now) %d %t, want %d", at, ok, runAt)
	}
	if _, ok := m.f.NextDueAfter(runAt); ok {
		t.Fatal("NextDueAfter(its time) found a later job")
	}
	if st := m.f.Stats(); st.Scheduled != 1 {
		t.Fatalf("Stats.Scheduled %d, want 1", st.Scheduled)
	}
	m.now = runAt - 1
	if got := m.acquire("w", 1); len(got) != 0 {
		t.Fatal("granted a nanosecond early")
	}
	m.now = runAt
	g := m.acquireOne("w")
	if g.Job.ID != "later" {
		t.Fatalf("granted %s", g.Job.ID)
	}

	// A retryable failure of a job with a policy waits out its delay.
	m.do(&SubmitJob{Spec: JobSpec{ID: "flaky", Queue: "default", Kind: "run", MaxAttempts: 3, MaxWorkerLosses: 3,
		OnWorkerLost: LostRequeue, Retry: &RetryPolicy{Initial: int64(time.Second), Max: int64(time.Hour), Multiplier: 2000}}})
	f := m.acquireOne("w")
	m.report(f, "r1", OutcomeFailed, true)
	if ev, ok := m.lastEvent(EventRetryScheduled); !ok || ev.JobID != "flaky" {
		t.Fatalf("no retry-scheduled event: %+v", ev)
	}
	if j := m.job("flaky"); j.State != JobQueued || j.NotBefore != m.now+int64(time.Second) {
		t.Fatalf("after the first failure: %s, not before %d (now %d)", j.State, j.NotBefore, m.now)
	}
	if got := m.acquire("w", 1); len(got) != 0 {
		t.Fatal("a retry granted before its backoff")
	}
	m.now += int64(time.Second)
	f = m.acquireOne("w")
	m.report(f, "r2", OutcomeFailed, true)
	if j := m.job("flaky"); j.NotBefore != m.now+int64(2*time.Second) {
		t.Fatalf("after the second failure: not before now+%s, want now+2s", time.Duration(j.NotBefore-m.now))
	}
	if err := m.f.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestCodecVersionFollowsTheFields: a submit or report without the fields
// of version 5 is written as before, so an older node applies it; with them
// it is version 5.
func TestCodecVersionFollowsTheFields(t *testing.T) {
	plain := &SubmitJob{Spec: spec("a")}
	timed := &SubmitJob{Spec: spec("a"), RunAt: 1}
	retried := &SubmitJob{Spec: spec("a")}
	retried.Spec.Retry = &RetryPolicy{Initial: 1, Max: 1, Multiplier: 1000}
	snooze := &Report{WorkerID: "w", JobID: "a", Token: 1, ReportID: "r", Outcome: OutcomeFailed, Retryable: true, RetryAfter: 1}
	for _, c := range []struct {
		cmd  Command
		want byte
	}{{plain, codecV2}, {timed, codecV5}, {retried, codecV5}, {snooze, codecV5}} {
		if got := CodecOf(c.cmd); got != c.want {
			t.Errorf("%+v: codec %d, want %d", c.cmd, got, c.want)
		}
		data, err := Encode(5, c.cmd)
		if err != nil {
			t.Fatal(err)
		}
		env, err := Decode(data)
		if err != nil || !same(env.Command, c.cmd) {
			t.Errorf("round trip of %+v: %+v %v", c.cmd, env.Command, err)
		}
	}
}

// TestResubmitIgnoresRunAtAndRetry: when and how to retry a job are not
// what the job is. The API's default policy depends on whether the cluster
// was upgraded, so a resubmit must find its job either way.
func TestResubmitIgnoresRunAtAndRetry(t *testing.T) {
	m := newMachine(t)
	m.do(&SubmitJob{Spec: spec("a")})
	again := spec("a")
	again.Retry = &RetryPolicy{Initial: int64(time.Second), Max: int64(time.Minute), Multiplier: 2000, Jitter: 20}
	res := m.do(&SubmitJob{Spec: again, RunAt: m.now + int64(time.Hour)}).(SubmitResult)
	if res.Created || res.Job.Retry != nil || res.Job.NotBefore != 0 {
		t.Fatalf("resubmit with a policy and a run-at time: %+v, want the first job as it was", res)
	}
}

// TestDelayedHeapDropsCancelledEntries: jobs cancelled while they wait
// leave no entries behind for long, even while a far job keeps the heap
// live (the entries are not in the state's size, so they must not grow
// with the jobs ever cancelled).
func TestDelayedHeapDropsCancelledEntries(t *testing.T) {
	m := newMachine(t)
	m.do(&SubmitJob{Spec: spec("far"), RunAt: m.now + int64(365*24*time.Hour)})
	for round := range 5 {
		for i := range 200 {
			id := fmt.Sprintf("r%d-%d", round, i)
			m.do(&SubmitJob{Spec: spec(id), RunAt: m.now + int64(time.Hour)})
			m.do(&Cancel{JobID: id})
		}
	}
	if n, live := len(m.f.st.delayed.items), m.f.st.delayed.live; live != 1 || n > 64+2*live {
		t.Fatalf("delayed heap: %d entries for %d waiting job", n, live)
	}
	if err := m.f.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
