package cluster_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

func TestHeartbeatVerdicts(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 3})
	do(t, c, &fsm.RegisterWorker{WorkerID: "other", Capacity: 1})
	for _, id := range []string{"keep", "stop", "lost", "theirs"} {
		do(t, c, &fsm.SubmitJob{Spec: spec(id, fsm.LostRequeue)})
	}
	keep := acquire(t, leader, "w", "r1")
	stop := acquire(t, leader, "w", "r2")
	lost := acquire(t, leader, "w", "r3")
	theirs := acquire(t, leader, "other", "r4")
	do(t, c, &fsm.Cancel{JobID: stop.Job.ID, Kill: true})
	do(t, c, &fsm.Release{WorkerID: "w", JobID: lost.Job.ID, Token: lost.Lease.Token})
	unnamed := acquire(t, leader, "w", "r5") // the worker "lost" this reply

	res := heartbeat(t, leader, "w", keep, stop, lost, theirs)
	want := []cluster.Verdict{cluster.VerdictKeep, cluster.VerdictStop, cluster.VerdictLost, cluster.VerdictLost}
	for i, st := range res.Leases {
		if st.Verdict != want[i] {
			t.Errorf("lease %d (%s): %s, want %s", i, st.JobID, st.Verdict, want[i])
		}
	}
	if res.Leases[1].Revoke != fsm.RevokeKill {
		t.Errorf("revoke %s, want kill", res.Leases[1].Revoke)
	}
	if len(res.Unnamed) != 1 || res.Unnamed[0].Token != unnamed.Lease.Token {
		t.Errorf("unnamed %+v, want lease %d", res.Unnamed, unnamed.Lease.Token)
	}
	// Bad input is refused before anything happens.
	if _, err := leader.Heartbeat(ctx(t), "bad id", nil); !errors.Is(err, fsm.ErrInvalidArgument) {
		t.Errorf("bad worker id: %v", err)
	}
}

// A worker silent past grace is unreachable: a long-poll it parked is not
// answered with a grant, and the leader records it. Heard again, it is
// reachable.
func TestUnreachableWorkerGetsNoGrant(t *testing.T) {
	for _, silence := range []time.Duration{clustertest.Grace, 2 * clustertest.Toleration} {
		t.Run(silence.String(), func(t *testing.T) { testUnreachable(t, silence) })
	}
}

// testUnreachable parks an acquire, lets the worker stay silent a little
// longer than silence (past toleration the leader also forgets it), then
// queues a job.
func testUnreachable(t *testing.T, silence time.Duration) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1})
	// Registering times the worker. Silent past grace, it is unreachable;
	// the acquire it then parks is heard, which makes it reachable again
	// on the next tick: that is how the test knows the acquire arrived.
	c.WaitFor(5*time.Second, "the registration to time the worker", func() bool { return leader.Status().WorkersTimed == 1 })
	c.Run(leader.Index, clustertest.Grace+2*c.Tick(leader.Index))
	c.WaitFor(5*time.Second, "worker.unreachable", func() bool { return countEvents(leader, fsm.EventWorkerUnreachable) == 1 })
	type result struct {
		res fsm.AcquireResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := leader.Acquire(ctx(t), fsm.Acquire{WorkerID: "w", RequestID: "parked", Queues: []string{"default"}, Max: 1}, 8*time.Second)
		done <- result{res, err}
	}()
	c.WaitFor(5*time.Second, "the parked acquire to be heard", func() bool {
		c.Run(leader.Index, c.Tick(leader.Index))
		return countEvents(leader, fsm.EventWorkerReachable) == 1
	})
	c.Run(leader.Index, silence+2*c.Tick(leader.Index))
	c.WaitFor(5*time.Second, "worker.unreachable again", func() bool { return countEvents(leader, fsm.EventWorkerUnreachable) == 2 })
	do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostRequeue)})
	r := <-done
	if !errors.Is(r.err, cluster.ErrUnreachable) || len(r.res.Grants) != 0 {
		t.Fatalf("parked acquire of an unreachable worker: %+v %v", r.res, r.err)
	}
	heartbeat(t, leader, "w")
	c.Run(leader.Index, 2*c.Tick(leader.Index))
	c.WaitFor(5*time.Second, "worker.reachable", func() bool { return countEvents(leader, fsm.EventWorkerReachable) == 2 })
	if g := acquire(t, leader, "w", "fresh"); g.Job.ID != "a" {
		t.Fatalf("reachable again, granted %s", g.Job.ID)
	}
}

// A long poll waits for a job instead of returning at once, and a retried
// request id gets the first answer.
func TestLongPollAcquire(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1})
	req := fsm.Acquire{WorkerID: "w", RequestID: "poll", Queues: []string{"default"}, Max: 1}
	got := make(chan fsm.AcquireResult, 1)
	go func() {
		res, err := leader.Acquire(ctx(t), req, 8*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostRequeue)})
	first := <-got
	if len(first.Grants) != 1 {
		t.Fatalf("long poll: %+v", first)
	}
	again, err := leader.Acquire(ctx(t), req, time.Second)
	if err != nil || !again.Replayed || again.Grants[0].Lease.Token != first.Grants[0].Lease.Token {
		t.Fatalf("retried request: %+v %v", again, err)
	}
	// Nothing queued and nothing to replay: the poll returns empty at its bound.
	empty, err := leader.Acquire(ctx(t), fsm.Acquire{WorkerID: "w", RequestID: "idle", Queues: []string{"default"}, Max: 1}, 50*time.Millisecond)
	if err != nil || len(empty.Grants) != 0 {
		t.Fatalf("idle poll: %+v %v", empty, err)
	}
}

// TestParkedAcquireWakesWhenAJobComesDue: a job submitted to run later
// changes nothing in the state when its time comes, yet a parked acquire is
// granted it then, never earlier (by the granting command's leader time);
// a retryable failure's backoff is waited out the same way.
func TestParkedAcquireWakesWhenAJobComesDue(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1})
	runAt := time.Now().Add(time.Second).UnixNano() // the fake clock's Wall is the real one
	do(t, c, &fsm.SubmitJob{Spec: spec("later", fsm.LostRequeue), RunAt: runAt})
	// The poll must park: a job already due would pass without the wake.
	if leader.FSM().ReadyAt([]string{"default"}, nil, time.Now().UnixNano()) != 0 {
		t.Fatal("the job came due before the acquire parked (submit took over a second): nothing tested")
	}
	res, err := leader.Acquire(ctx(t), fsm.Acquire{WorkerID: "w", RequestID: "r1", Queues: []string{"default"}, Max: 1}, 8*time.Second)
	if err != nil || len(res.Grants) != 1 {
		t.Fatalf("parked acquire: %+v %v", res, err)
	}
	if g := res.Grants[0]; g.Lease.GrantedAt < runAt {
		t.Fatalf("granted at %d, %s before its run-at time", g.Lease.GrantedAt, time.Duration(runAt-g.Lease.GrantedAt))
	}

	// A retryable failure with a policy: the next grant waits out the delay.
	s := spec("flaky", fsm.LostRequeue)
	s.Retry = &fsm.RetryPolicy{Initial: int64(300 * time.Millisecond), Max: int64(time.Second), Multiplier: 2000}
	do(t, c, &fsm.SubmitJob{Spec: s})
	do(t, c, &fsm.Report{WorkerID: "w", JobID: "later", Token: res.Grants[0].Lease.Token, ReportID: "done", Outcome: fsm.OutcomeSucceeded})
	g := acquire(t, leader, "w", "r2")
	rep := do(t, c, &fsm.Report{WorkerID: "w", JobID: "flaky", Token: g.Lease.Token, ReportID: "fail", Outcome: fsm.OutcomeFailed, Retryable: true}).(fsm.ReportResult)
	if !rep.Requeued {
		t.Fatalf("retryable failure not requeued: %+v", rep)
	}
	j, err := leader.FSM().Job("flaky")
	if err != nil || j.NotBefore == 0 {
		t.Fatalf("requeued job: %+v %v", j, err)
	}
	res, err = leader.Acquire(ctx(t), fsm.Acquire{WorkerID: "w", RequestID: "r3", Queues: []string{"default"}, Max: 1}, 8*time.Second)
	if err != nil || len(res.Grants) != 1 {
		t.Fatalf("parked acquire after the failure: %+v %v", res, err)
	}
	if at := res.Grants[0].Lease.GrantedAt; at < j.NotBefore {
		t.Fatalf("retry granted %s before its backoff ended", time.Duration(j.NotBefore-at))
	}
}

// A paused queue grants nothing, and a parked acquire on it is granted by
// the resume's apply: its wait is far longer than the test, and no job is
// delayed, so only the apply can wake it. A limit of 1 holds a second
// grant until the first lease ends.
func TestParkedAcquireWakesWhenItsQueueOpens(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 2})
	do(t, c, &fsm.RegisterWorker{WorkerID: "w2", Capacity: 2})
	do(t, c, &fsm.SetQueue{Queue: "default", SetPaused: true, Paused: true})
	do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostRequeue)})
	do(t, c, &fsm.SubmitJob{Spec: spec("b", fsm.LostRequeue)})

	type result struct {
		res fsm.AcquireResult
		err error
	}
	park := func(worker, req string) <-chan result {
		done := make(chan result, 1)
		go func() {
			res, err := leader.Acquire(ctx(t), fsm.Acquire{WorkerID: worker, RequestID: req, Queues: []string{"default"}, Max: 1}, time.Hour)
			done <- result{res, err}
		}()
		c.WaitFor(5*time.Second, worker+"'s acquire to park", func() bool { return leader.ParkedAcquires() == 1 })
		return done
	}
	first := park("w1", "r1")
	// The limit goes with the resume: one lease at a time.
	do(t, c, &fsm.SetQueue{Queue: "default", SetMaxRunning: true, MaxRunning: 1})
	do(t, c, &fsm.SetQueue{Queue: "default", SetPaused: true, Paused: false})
	r := <-first
	if r.err != nil || len(r.res.Grants) != 1 || r.res.Grants[0].Job.ID != "a" {
		t.Fatalf("parked acquire after the resume: %+v %v", r.res, r.err)
	}
	g := r.res.Grants[0]

	second := park("w2", "r2")
	select {
	case r := <-second:
		t.Fatalf("a second grant under a limit of 1: %+v %v", r.res, r.err)
	default:
	}
	do(t, c, &fsm.Report{WorkerID: "w1", JobID: "a", Token: g.Lease.Token, ReportID: "done", Outcome: fsm.OutcomeSucceeded})
	r = <-second
	if r.err != nil || len(r.res.Grants) != 1 || r.res.Grants[0].Job.ID != "b" {
		t.Fatalf("parked acquire after the first lease ended: %+v %v", r.res, r.err)
	}
	if rate := leader.GrantRate("default"); rate != 2.0/60 {
		t.Fatalf("grant rate %v, want 2 grants a minute", rate)
	}
}

// While a voter's build is at level 5, a queue setting is refused naming
// it, and nothing changes: grants go on as before.
func TestQueueSettingsNeedLevel6(t *testing.T) {
	c := clustertest.New(t, 3, func(i int, cfg *cluster.Config) {
		if i == 2 {
			cluster.SayLevel(cfg, 5)
		}
		cluster.AskLevelsEvery(cfg, 100*time.Millisecond)
	})
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1})
	do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostRequeue)})
	var up *cluster.UpgradeError
	c.WaitFor(10*time.Second, "the leader to hear node-2 at level 5", func() bool {
		_, err := c.Leader().Apply(ctx(t), &fsm.SetQueue{Queue: "default", SetPaused: true, Paused: true})
		return errors.As(err, &up) && up.Need == 6 && len(up.Nodes) == 1 && strings.HasPrefix(up.Nodes[0], "node-2 (level 5")
	})
	if s := c.Leader().FSM().QueueSettingsOf(); len(s) != 0 {
		t.Fatalf("a refused pause changed the settings: %+v", s)
	}
	if g := acquire(t, c.Leader(), "w", "r1"); g.Job.ID != "a" {
		t.Fatalf("granted %s", g.Job.ID)
	}
}

// Grant rates are the leader's memory of its own term: a deposed leader
// shows 0, and a node that leads again starts from zero, not from what it
// counted in an earlier term.
func TestGrantRatesStartFromZeroEachTerm(t *testing.T) {
	c := clustertest.New(t, 3)
	a := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 2})
	do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostRequeue)})
	acquire(t, a, "w1", "r1")
	if rate := a.GrantRate("default"); rate != 1.0/60 {
		t.Fatalf("grant rate %v, want 1 grant a minute", rate)
	}
	b := c.Nodes[(a.Index+1)%3]
	for _, to := range []*clustertest.Node{b, a} {
		c.Transfer(c.Leader(), to)
		c.WaitFor(10*time.Second, to.ID()+" leads", func() bool { return c.Leader() == to })
		if to == b {
			// The deposed node learns of its loss on its own leader loop,
			// after Raft has moved on: awaited, not assumed. A follower that
			// kept its count would show it for the window's whole minute.
			c.WaitFor(10*time.Second, "deposed, "+a.ID()+"'s grant rate 0 (a follower counts nothing)", func() bool {
				return a.GrantRate("default") == 0
			})
		}
	}
	if rate := a.GrantRate("default"); rate != 0 {
		t.Fatalf("leading again, %s's grant rate is %v from its earlier term, want 0", a.ID(), rate)
	}
	do(t, c, &fsm.SubmitJob{Spec: spec("b", fsm.LostRequeue)})
	acquire(t, a, "w1", "r2")
	if rate := a.GrantRate("default"); rate != 1.0/60 {
		t.Fatalf("grant rate %v after one grant this term, want 1 a minute", rate)
	}
}
