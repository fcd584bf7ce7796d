package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/clock/clocktest"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

func TestHappyPath(t *testing.T) {
	c := clustertest.New(t, 3, slowExecutor())
	cl := newClient(t, c, nil)
	runWorker(t, client.WorkerOptions{Client: cl, ID: "w1", Handlers: map[string]client.Handler{
		"default": func(ctx context.Context, j *client.Job) (client.Result, error) {
			return client.Result{Ref: "commit-" + string(j.Payload)}, nil
		},
	}})
	job, created, err := cl.Submit(ctx(t), &pb.JobSpec{Id: "job-1", Payload: []byte("abc")})
	if err != nil || !created || job.GetState() != pb.JobState_JOB_STATE_QUEUED {
		t.Fatalf("submit: %+v %t %v", job, created, err)
	}
	done := waitJob(t, c, cl, "job-1", func(j *pb.Job) bool { return j.GetState() == pb.JobState_JOB_STATE_REPORTED })
	last := done.GetLeases()[len(done.GetLeases())-1]
	if last.GetOutcome() != pb.Outcome_OUTCOME_SUCCEEDED || last.GetRef() != "commit-abc" || len(done.GetLeases()) != 1 {
		t.Fatalf("reported job: %+v", done)
	}
	// The client pinned itself to the leader from the replies' hints.
	if _, api := c.Leader().Node.Leader(); cl.Leader() != api {
		t.Fatalf("client talks to %s, leader is %s", cl.Leader(), api)
	}
	// Submitting the same job again returns it; another spec conflicts.
	if _, created, err := cl.Submit(ctx(t), &pb.JobSpec{Id: "job-1", Payload: []byte("abc")}); err != nil || created {
		t.Fatalf("resubmit: %t %v", created, err)
	}
	if _, _, err := cl.Submit(ctx(t), &pb.JobSpec{Id: "job-1", Payload: []byte("other")}); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("conflicting resubmit: %v", err)
	}
}

// A kill reaches the running handler as its context's cause, and the job
// still reports.
func TestRevokeReachesHandler(t *testing.T) {
	c := clustertest.New(t, 3, slowExecutor())
	cl := newClient(t, c, nil)
	started := make(chan struct{})
	cause := make(chan error, 1)
	runWorker(t, client.WorkerOptions{Client: cl, ID: "w1", Handlers: map[string]client.Handler{
		"default": func(ctx context.Context, j *client.Job) (client.Result, error) {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return client.Result{}, ctx.Err()
		},
	}})
	if _, _, err := cl.Submit(ctx(t), &pb.JobSpec{Id: "j"}); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, revoked, err := cl.Cancel(ctx(t), "j", true, "operator"); err != nil || !revoked {
		t.Fatalf("kill: %t %v", revoked, err)
	}
	var rev *client.RevokedError
	if err := <-cause; !errors.As(err, &rev) || !rev.Kill {
		t.Fatalf("handler's cause %v, want a kill", err)
	}
	done := waitJob(t, c, cl, "j", func(j *pb.Job) bool { return j.GetState() == pb.JobState_JOB_STATE_REPORTED })
	if o := done.GetLeases()[0].GetOutcome(); o != pb.Outcome_OUTCOME_KILLED {
		t.Fatalf("outcome %s, want killed", o)
	}
}

// A report with an old token is refused and kept as an event with its ref;
// the same report twice gets the same answer.
func TestStaleAndRepeatedReports(t *testing.T) {
	c := clustertest.New(t, 3, slowExecutor())
	cl := newClient(t, c, nil)
	for _, w := range []string{"old", "new"} {
		if _, err := cl.RegisterWorker(ctx(t), w, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := cl.Submit(ctx(t), &pb.JobSpec{Id: "j"}); err != nil {
		t.Fatal(err)
	}
	acq := func(w string) *pb.Grant {
		res, err := cl.Acquire(ctx(t), &pb.AcquireRequest{WorkerId: w, Queues: []string{"default"}})
		if err != nil || len(res.GetGrants()) != 1 {
			t.Fatalf("acquire: %+v %v", res, err)
		}
		return res.GetGrants()[0]
	}
	old := acq("old")
	if _, err := cl.Release(ctx(t), "old", "j", old.GetLease().GetToken(), "test"); err != nil {
		t.Fatal(err)
	}
	cur := acq("new")
	_, err := cl.Report(ctx(t), &pb.ReportRequest{WorkerId: "old", JobId: "j", Token: old.GetLease().GetToken(),
		ReportId: "late", Outcome: pb.Outcome_OUTCOME_SUCCEEDED, Ref: "commit-stale"})
	if !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("stale report: %v", err)
	}
	evs, err := cl.Events(ctx(t), 0, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs.GetEvents() {
		found = found || ev.GetType() == "lease.stale_report" && ev.GetRef() == "commit-stale" && ev.GetToken() == old.GetLease().GetToken()
	}
	if !found {
		t.Fatal("no lease.stale_report event with the ref")
	}
	rep := &pb.ReportRequest{WorkerId: "new", JobId: "j", Token: cur.GetLease().GetToken(), ReportId: "r1",
		Outcome: pb.Outcome_OUTCOME_FAILED, Retryable: true, Ref: "x"}
	first, err := cl.Report(ctx(t), rep)
	if err != nil {
		t.Fatal(err)
	}
	again, err := cl.Report(ctx(t), rep)
	if err != nil || again.String() != first.String() {
		t.Fatalf("same report twice: %v / %v (%v)", first, again, err)
	}
	other := &pb.ReportRequest{WorkerId: "new", JobId: "j", Token: cur.GetLease().GetToken(), ReportId: "r2",
		Outcome: pb.Outcome_OUTCOME_SUCCEEDED}
	if _, err := cl.Report(ctx(t), other); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("different report on a reported lease: %v", err)
	}
	// A worker acts only on its own leases.
	if _, err := cl.Start(ctx(t), "old", "j", cur.GetLease().GetToken()); !errors.Is(err, client.ErrStaleToken) && !errors.Is(err, client.ErrNotOwner) {
		t.Fatalf("another worker's lease: %v", err)
	}
}

// The leader is killed while a job runs: the worker carries on against the
// new leader, no second lease is granted, and the job reports once.
func TestLeaderKilledMidJob(t *testing.T) {
	c := clustertest.New(t, 3, slowExecutor())
	cl := newClient(t, c, nil)
	started, finish := make(chan struct{}), make(chan struct{})
	var cancelled atomic.Bool
	runWorker(t, client.WorkerOptions{Client: cl, ID: "w1", Handlers: map[string]client.Handler{
		"default": func(ctx context.Context, j *client.Job) (client.Result, error) {
			close(started)
			select {
			case <-finish:
				return client.Result{Ref: "done"}, nil
			case <-ctx.Done():
				cancelled.Store(true)
				return client.Result{}, ctx.Err()
			}
		},
	}})
	if _, _, err := cl.Submit(ctx(t), &pb.JobSpec{Id: "j"}); err != nil {
		t.Fatal(err)
	}
	<-started
	old := c.Leader()
	c.Kill(old.Index)
	leader := c.Leader()
	// The worker's heartbeats reach the new leader.
	c.WaitFor(10*time.Second, "the new leader to hear the worker", func() bool { return leader.Status().WorkersTimed == 1 })
	close(finish)
	done := waitJob(t, c, cl, "j", func(j *pb.Job) bool { return j.GetState() == pb.JobState_JOB_STATE_REPORTED })
	if cancelled.Load() || len(done.GetLeases()) != 1 || done.GetLeases()[0].GetRef() != "done" {
		t.Fatalf("after failover: cancelled=%t job %+v", cancelled.Load(), done)
	}
	c.Restart(old.Index)
	c.Converged()
}

// A restarted worker with the same id finds its leases: it re-attaches to
// the one it can and releases the other.
func TestRestartedWorkerReattaches(t *testing.T) {
	c := clustertest.New(t, 3, slowExecutor())
	cl := newClient(t, c, nil)
	// The first incarnation: registered, holding two leases, then gone.
	if _, err := cl.RegisterWorker(ctx(t), "w1", 2); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"keep", "drop"} {
		if _, _, err := cl.Submit(ctx(t), &pb.JobSpec{Id: id}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := cl.Acquire(ctx(t), &pb.AcquireRequest{WorkerId: "w1", Queues: []string{"default"}, Max: 2, Start: true})
	if err != nil || len(res.GetGrants()) != 2 {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	// The new incarnation takes no new jobs (its queue is empty), so what
	// happens to the two leases is the re-attachment alone.
	runWorker(t, client.WorkerOptions{Client: cl, ID: "w1", Concurrency: 2, Queues: []string{"elsewhere"},
		Handlers: map[string]client.Handler{"default": func(ctx context.Context, j *client.Job) (client.Result, error) {
			return client.Result{}, fmt.Errorf("a new job ran: %s", j.ID)
		}},
		Reattach: func(ctx context.Context, j *client.Job) (client.Handler, bool) {
			if j.ID != "keep" {
				return nil, false
			}
			return func(ctx context.Context, j *client.Job) (client.Result, error) {
				return client.Result{Ref: "reattached"}, nil
			}, true
		},
	})
	kept := waitJob(t, c, cl, "keep", func(j *pb.Job) bool { return j.GetState() == pb.JobState_JOB_STATE_REPORTED })
	if kept.GetLeases()[0].GetRef() != "reattached" || len(kept.GetLeases()) != 1 {
		t.Fatalf("re-attached job %+v", kept)
	}
	dropped := waitJob(t, c, cl, "drop", func(j *pb.Job) bool {
		return len(j.GetLeases()) >= 1 && j.GetLeases()[0].GetState() == pb.LeaseState_LEASE_STATE_RELEASED
	})
	if dropped.GetAttempts() != 0 {
		t.Fatalf("a released job used an attempt: %+v", dropped)
	}
}

// A worker cut off from the cluster stops its job before the cluster
// expires the lease. Both sides run on fake clocks advanced in lockstep
// from the last acknowledged heartbeat, so the slack between the
// self-stop and the expiry is measured on one timeline, exactly.
func TestCutOffWorkerStopsBeforeExpiry(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	renew, _, toleration := leader.Node.Timings()
	sw := &switchNet{}
	cl := newClient(t, c, sw)
	wclock := clocktest.NewFakeClock()
	started := make(chan struct{})
	stopped := make(chan time.Time, 1)
	runWorker(t, client.WorkerOptions{Client: cl, ID: "w1", Clock: wclock, PollWait: time.Second,
		Handlers: map[string]client.Handler{"default": func(ctx context.Context, j *client.Job) (client.Result, error) {
			close(started)
			<-ctx.Done()
			stopped <- wclock.Now()
			return client.Result{}, ctx.Err()
		}}})
	if _, _, err := cl.Submit(ctx(t), &pb.JobSpec{Id: "j", OnWorkerLost: pb.LostPolicy_LOST_POLICY_FAIL}); err != nil {
		t.Fatal(err)
	}
	<-started
	// One acknowledged heartbeat: the worker re-arms its self-stop at
	// send + toleration - 2 x renew.
	sent := wclock.Now().Add(renew)
	wclock.Advance(renew)
	if err := wclock.WaitForTimerAt(ctx(t), sent.Add(toleration-2*renew)); err != nil {
		t.Fatalf("no acknowledged heartbeat: %v", err)
	}
	// Cut. From here both clocks move together, a tick at a time.
	sw.set(true)
	tick := c.Tick(leader.Index)
	var stopAt, expiredAt time.Duration
	for elapsed := time.Duration(0); expiredAt == 0; {
		c.Step(leader.Index, tick)
		wclock.Advance(tick)
		elapsed += tick
		if stopAt == 0 && elapsed >= toleration-2*renew {
			at := <-stopped
			stopAt = at.Sub(sent)
		}
		if j, err := leader.FSM().Job("j"); err == nil && j.State.Terminal() {
			expiredAt = elapsed
		}
		if elapsed > 2*toleration {
			t.Fatal("the lease never expired")
		}
	}
	if stopAt == 0 || stopAt >= expiredAt {
		t.Fatalf("self-stop at %v, expiry at %v after the last acknowledged heartbeat", stopAt, expiredAt)
	}
	t.Logf("self-stop %v, expiry %v after the last acknowledged heartbeat: slack %v (2 x renew = %v)",
		stopAt, expiredAt, expiredAt-stopAt, 2*renew)
	sw.set(false)
}

// /metrics counts Raft log writes, for benchmarks' writes per operation.
func TestMetricsEndpoint(t *testing.T) {
	c := clustertest.New(t, 3, slowExecutor())
	cl := newClient(t, c, nil)
	if _, _, err := cl.Submit(ctx(t), &pb.JobSpec{Id: "j"}); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get("http://" + c.Leader().APIAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, want := range []string{"leasehold_raft_log_writes_total ", "leasehold_leader 1", `leasehold_jobs{state="queued"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

// Made-up input gets its answer over the wire and through the Go client: a
// heartbeat from a worker nobody registered is UNKNOWN_WORKER, a report
// with a token never granted is INVALID_ARGUMENT naming the token. A
// worker whose registration is gone (removed as idle by the leader, or
// here by an operator) is told UNKNOWN_WORKER, registers again, and goes
// on taking jobs.
func TestUnknownWorkersAndMadeUpTokens(t *testing.T) {
	c := clustertest.New(t, 3, slowExecutor())
	cl := newClient(t, c, nil)
	if _, err := cl.Heartbeat(ctx(t), "ghost", nil); !errors.Is(err, client.ErrUnknownWorker) {
		t.Fatalf("heartbeat of a ghost: %v", err)
	}
	_, err := cl.Report(ctx(t), &pb.ReportRequest{WorkerId: "ghost", JobId: "never", Token: 1 << 40, ReportId: "r",
		Outcome: pb.Outcome_OUTCOME_SUCCEEDED})
	var e *client.Error
	if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &e) || e.Field != "token" {
		t.Fatalf("report with a token never granted: %v", err)
	}
	runWorker(t, client.WorkerOptions{Client: cl, ID: "w1", Handlers: map[string]client.Handler{
		"default": func(ctx context.Context, j *client.Job) (client.Result, error) { return client.Result{Ref: "ok"}, nil },
	}})
	for i, id := range []string{"before", "after"} {
		if i == 1 {
			if _, err := cl.DeregisterWorker(ctx(t), "w1"); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := cl.Submit(ctx(t), &pb.JobSpec{Id: id}); err != nil {
			t.Fatal(err)
		}
		waitJob(t, c, cl, id, func(j *pb.Job) bool { return j.GetState() == pb.JobState_JOB_STATE_REPORTED })
	}
	registered := 0
	for _, ev := range c.Leader().FSM().Events(0, fsm.MaxPageSize).Events {
		if ev.Type == fsm.EventWorkerRegistered && ev.WorkerID == "w1" {
			registered++
		}
	}
	if registered != 2 {
		t.Fatalf("w1 registered %d times, want 2", registered)
	}
}
