package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Acquire → handler with the payload → report with the handler's ref; one
// heartbeat per renew for the whole worker, naming every lease it holds.
func TestWorkerHappyPath(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("j1", "echo", 11, "p1")
	h.grants <- grant("j2", "echo", 12, "p2")
	started := make(chan *client.Job, 2)
	finish := make(chan struct{})
	w := h.run(client.WorkerOptions{
		Concurrency: 2,
		Handlers: map[string]client.Handler{"echo": func(ctx context.Context, job *client.Job) (client.Result, error) {
			started <- job
			<-finish
			return client.Result{Ref: "ref-" + string(job.Payload)}, nil
		}},
	})

	got := map[string]*client.Job{}
	for range 2 {
		j := recv(t, "a handler to start", started)
		got[j.ID] = j
	}
	for id, want := range map[string]struct {
		token   uint64
		payload string
	}{"j1": {11, "p1"}, "j2": {12, "p2"}} {
		j := got[id]
		if j == nil || j.Token != want.token || string(j.Payload) != want.payload || j.Kind != "echo" || j.Queue != "default" || j.Submitter != "exec" || j.Attempts != 1 {
			t.Fatalf("job %s: %+v", id, j)
		}
	}
	reg := h.node.requests("RegisterWorker")[0].msg.(*leaseholdv1.RegisterWorkerRequest)
	if reg.GetWorkerId() != workerID || reg.GetCapacity() != 2 {
		t.Fatalf("registered %v, want capacity 2", reg)
	}
	acq := h.node.requests("Acquire")[0].msg.(*leaseholdv1.AcquireRequest)
	if acq.GetMax() != 2 || !acq.GetStart() || acq.GetWait().AsDuration() != client.DefaultPollWait ||
		!slices.Equal(acq.GetQueues(), []string{"default"}) || !slices.Equal(acq.GetKinds(), []string{"echo"}) {
		t.Fatalf("acquire request %v", acq)
	}

	const beats = 3
	for i := 1; i <= beats; i++ {
		h.waitTimerAt(time.Duration(i) * renew)
		h.advanceTo(time.Duration(i) * renew)
		waitFor(t, fmt.Sprintf("heartbeat %d", i), func() bool { return len(h.heartbeats()) >= i })
		if hb := h.heartbeats(); len(hb) != i || !slices.Equal(hb[i-1], []uint64{11, 12}) {
			t.Fatalf("after %d renews, heartbeats %v: want one per renew naming 11 and 12", i, hb)
		}
	}

	close(finish)
	waitFor(t, "two reports", func() bool { return len(h.reports()) == 2 })
	for _, r := range h.reports() {
		want := map[uint64]string{11: "ref-p1", 12: "ref-p2"}[r.GetToken()]
		if r.GetRef() != want || r.GetOutcome() != leaseholdv1.Outcome_OUTCOME_SUCCEEDED || r.GetWorkerId() != workerID || r.GetReportId() == "" {
			t.Fatalf("report %v, want ref %q, succeeded", r, want)
		}
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(h.heartbeats()); n != beats {
		t.Fatalf("%d heartbeats over %d renews", n, beats)
	}
	if len(h.released()) != 0 {
		t.Fatalf("released %v", h.released())
	}
}

// A STOP verdict cancels the handler with a *RevokedError (Kill as the
// server said), and the job still reports, cancelled or killed.
func TestWorkerRevoke(t *testing.T) {
	for _, tc := range []struct {
		revoke  leaseholdv1.Revoke
		kill    bool
		outcome leaseholdv1.Outcome
	}{
		{leaseholdv1.Revoke_REVOKE_CANCEL, false, leaseholdv1.Outcome_OUTCOME_CANCELLED},
		{leaseholdv1.Revoke_REVOKE_KILL, true, leaseholdv1.Outcome_OUTCOME_KILLED},
	} {
		t.Run(tc.revoke.String(), func(t *testing.T) {
			h := newWorkerHarness(t)
			h.grants <- grant("j1", "k", 31, "")
			b := newBlockingHandler()
			w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": b.handle}})
			recv(t, "the handler to start", b.started)

			h.setVerdict(31, leaseholdv1.Verdict_VERDICT_STOP, tc.revoke)
			h.waitTimerAt(renew)
			h.advanceTo(renew)
			cause := recv(t, "the handler to be revoked", b.causes)
			var rev *client.RevokedError
			if !errors.Is(cause, client.ErrRevoked) || !errors.As(cause, &rev) || rev.Kill != tc.kill {
				t.Fatalf("cause %v, want a *RevokedError with Kill %v", cause, tc.kill)
			}
			waitFor(t, "the report", func() bool { return len(h.reports()) == 1 })
			if r := h.reports()[0]; r.GetToken() != 31 || r.GetOutcome() != tc.outcome {
				t.Fatalf("report %v, want %v", r, tc.outcome)
			}
			if err := w.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// A LOST verdict cancels the handler with ErrLeaseLost, and nothing is
// reported or released.
func TestWorkerLostVerdict(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("j1", "k", 41, "")
	b := newBlockingHandler()
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": b.handle}})
	recv(t, "the handler to start", b.started)

	h.setVerdict(41, leaseholdv1.Verdict_VERDICT_LOST, leaseholdv1.Revoke_REVOKE_NONE)
	h.waitTimerAt(renew)
	h.advanceTo(renew)
	if cause := recv(t, "the handler to stop", b.causes); !errors.Is(cause, client.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	// The task is gone once the worker asks for a job again.
	waitFor(t, "a second acquire", func() bool { return h.node.count("Acquire") == 2 })
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(h.reports()) != 0 || len(h.released()) != 0 {
		t.Fatalf("reports %v, released %v: a lost lease gets neither", h.reports(), h.released())
	}
}

// Heartbeats go unacknowledged: the worker stops its jobs exactly when its
// clock passes the send time of the last acknowledged heartbeat +
// toleration − 2×renew, not a moment before, and reports nothing. It takes
// no job until a heartbeat is acknowledged again.
func TestWorkerSelfStop(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("j1", "k", 51, "")
	b := newBlockingHandler()
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": b.handle}})
	recv(t, "the handler to start", b.started)

	// The first heartbeat, sent at start+renew, is answered 5s later on
	// the worker's clock: the deadline counts from the send.
	h.mu.Lock()
	h.hbDelay = 5 * time.Second
	h.mu.Unlock()
	h.waitTimerAt(renew)
	h.advanceTo(renew)
	deadline := renew + toleration - 2*renew // from the send time
	h.waitTimerAt(deadline)
	if h.clock.Now() != h.start.Add(renew+5*time.Second) {
		t.Fatalf("the fake did not delay the answer: now start+%v", h.clock.Now().Sub(h.start))
	}

	h.setHeartbeatFail(true)
	h.advanceTo(deadline - time.Millisecond)
	h.waitTimerAt(deadline - time.Millisecond + renew) // the next tick, re-armed
	if !slices.Contains(h.clock.Deadlines(), h.start.Add(deadline)) {
		t.Fatalf("the self-stop timer is gone before its deadline (armed: %v)", h.offsets())
	}
	select {
	case cause := <-b.causes:
		t.Fatalf("handler stopped at start+%v, before the deadline start+%v: %v", h.clock.Now().Sub(h.start), deadline, cause)
	default:
	}

	h.advanceTo(deadline + time.Millisecond)
	if cause := recv(t, "the self-stop", b.causes); !errors.Is(cause, client.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}

	// Stopped: the job is not reported, and a waiting job is not taken
	// until a heartbeat gets through.
	h.grants <- grant("j2", "k", 52, "")
	h.setHeartbeatFail(false)
	next := deadline + 2*time.Millisecond + renew
	h.advanceTo(next) // the next tick: the heartbeat that gets through
	if j := recv(t, "a job after the ack", b.started); j.ID != "j2" {
		t.Fatalf("took %s, want j2", j.ID)
	}
	if err := h.stopDraining(w, client.DefaultDrainTimeout); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, r := range h.reports() {
		if r.GetToken() == 51 {
			t.Fatalf("self-stopped job reported: %v", r)
		}
	}
}

// Shutdown: stop acquiring; a handler that finishes within the drain bound
// reports; heartbeats go on meanwhile; one that does not is cancelled with
// ErrShutdown and its lease released.
func TestWorkerGracefulShutdown(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("quick", "quick", 61, "")
	h.grants <- grant("slow", "slow", 62, "")
	quickStarted := make(chan struct{})
	finishQuick := make(chan struct{})
	slow := newBlockingHandler()
	w := h.run(client.WorkerOptions{
		Concurrency:  2,
		DrainTimeout: 30 * time.Second,
		Handlers: map[string]client.Handler{
			"quick": func(ctx context.Context, job *client.Job) (client.Result, error) {
				close(quickStarted)
				<-finishQuick
				return client.Result{Ref: "quick-done"}, nil
			},
			"slow": slow.handle,
		},
	})
	recv(t, "quick to start", quickStarted)
	recv(t, "slow to start", slow.started)

	w.cancel()
	h.waitTimerAt(30 * time.Second) // the drain bound

	h.waitTimerAt(renew)
	h.advanceTo(renew)
	waitFor(t, "a heartbeat during the drain", func() bool { return len(h.heartbeats()) == 1 })
	if hb := h.heartbeats()[0]; !slices.Equal(hb, []uint64{61, 62}) {
		t.Fatalf("heartbeat during the drain named %v, want both leases", hb)
	}

	close(finishQuick)
	waitFor(t, "quick's report", func() bool { return len(h.reports()) == 1 })
	if r := h.reports()[0]; r.GetToken() != 61 || r.GetRef() != "quick-done" {
		t.Fatalf("report %v", r)
	}
	select {
	case cause := <-slow.causes:
		t.Fatalf("slow cancelled before the drain bound: %v", cause)
	default:
	}

	h.advanceTo(30 * time.Second)
	if cause := recv(t, "slow to be cancelled", slow.causes); !errors.Is(cause, client.ErrShutdown) {
		t.Fatalf("cause %v, want ErrShutdown", cause)
	}
	if err := w.wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := h.released(); !slices.Equal(got, []uint64{62}) {
		t.Fatalf("released %v, want [62]", got)
	}
	if len(h.reports()) != 1 {
		t.Fatalf("reports %v: the cancelled job must not report", h.reports())
	}
	if n := h.node.count("Acquire"); n != 1 {
		t.Fatalf("%d acquires: none after shutdown began", n)
	}
}

// Re-attach after a restart: the worker's live leases are listed; the one
// Reattach accepts runs and reports, the other is released.
func TestWorkerReattach(t *testing.T) {
	h := newWorkerHarness(t)
	h.live = []*leaseholdv1.Grant{grant("keep", "k", 71, "kp"), grant("drop", "k", 72, "dp")}
	asked := make(chan string, 2)
	w := h.run(client.WorkerOptions{
		Handlers: map[string]client.Handler{"k": newBlockingHandler().handle},
		Reattach: func(ctx context.Context, job *client.Job) (client.Handler, bool) {
			asked <- job.ID
			if job.ID != "keep" {
				return nil, false
			}
			return func(ctx context.Context, job *client.Job) (client.Result, error) {
				return client.Result{Ref: "reattached-" + string(job.Payload)}, nil
			}, true
		},
	})
	waitFor(t, "the report and the release", func() bool { return len(h.reports()) == 1 && len(h.released()) == 1 })
	if r := h.reports()[0]; r.GetToken() != 71 || r.GetRef() != "reattached-kp" || r.GetOutcome() != leaseholdv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("report %v", r)
	}
	if got := h.released(); !slices.Equal(got, []uint64{72}) {
		t.Fatalf("released %v, want [72]", got)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if a, b := <-asked, <-asked; a != "keep" || b != "drop" {
		t.Fatalf("asked about %s, %s", a, b)
	}
	lreq := h.node.requests("ListLeases")[0].msg.(*leaseholdv1.ListLeasesRequest)
	if lreq.GetWorkerId() != workerID {
		t.Fatalf("listed leases of %q", lreq.GetWorkerId())
	}
}

// A handler that says its execution is gone (ErrExecutionLost) has the
// lease released as lost, and nothing reported; a cluster that cannot apply
// that yet (UPGRADE_REQUIRED), or a node of a build from before it that
// refuses the field, gets a failure report instead.
func TestWorkerSettlesLostExecutions(t *testing.T) {
	refusals := map[string]error{
		"upgrading": transport.NewError(transport.ReasonUpgradeRequired, errors.New("upgrade node-3"), nil),
		"old build": transport.NewError(transport.ReasonInvalidArgument, errors.New("proto: unknown field 5"), &leaseholdv1.ErrorDetail{Field: "5"}),
	}
	for _, mode := range []string{"current", "upgrading", "old build"} {
		h := newWorkerHarness(t)
		upgrading := mode != "current"
		if refusal := refusals[mode]; refusal != nil {
			h.node.on("Release", func(context.Context, proto.Message, http.Header) (proto.Message, error) {
				return nil, refusal
			})
		}
		h.live = []*leaseholdv1.Grant{grant("gone", "k", 91, "")}
		w := h.run(client.WorkerOptions{
			Handlers: map[string]client.Handler{"k": newBlockingHandler().handle},
			Reattach: func(context.Context, *client.Job) (client.Handler, bool) {
				return func(context.Context, *client.Job) (client.Result, error) {
					return client.Result{}, fmt.Errorf("%w: the command is not running", client.ErrExecutionLost)
				}, true
			},
		})
		waitFor(t, "the release as lost", func() bool { return len(h.released()) == 1 })
		rel := h.node.requests("Release")[0].msg.(*leaseholdv1.ReleaseRequest)
		if !rel.GetLost() || rel.GetToken() != 91 || !strings.Contains(rel.GetReason(), "the command is not running") {
			t.Fatalf("release %v, want token 91 released as lost with the handler's reason", rel)
		}
		if upgrading {
			waitFor(t, "the failure report", func() bool { return len(h.reports()) == 1 })
			if r := h.reports()[0]; r.GetOutcome() != leaseholdv1.Outcome_OUTCOME_FAILED || !strings.HasPrefix(r.GetMessage(), "worker lost") {
				t.Fatalf("report %v, want failed, worker lost", r)
			}
		}
		if err := w.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if !upgrading && len(h.reports()) != 0 {
			t.Fatalf("reports %v: a lost execution reports nothing", h.reports())
		}
	}
}

// An execution that vanishes while the worker shuts down (its supervisor
// died with it) is settled as lost, not released to run again.
func TestWorkerShutdownSettlesLostExecution(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("gone", "k", 93, "")
	started := make(chan struct{})
	w := h.run(client.WorkerOptions{
		DrainTimeout: 30 * time.Second,
		Handlers: map[string]client.Handler{"k": func(ctx context.Context, _ *client.Job) (client.Result, error) {
			close(started)
			<-ctx.Done()
			return client.Result{}, fmt.Errorf("%w: the supervisor exited without a result", client.ErrExecutionLost)
		}},
	})
	recv(t, "the job to start", started)
	w.cancel()
	h.waitTimerAt(30 * time.Second) // the drain bound
	h.advanceTo(30 * time.Second)
	if err := w.wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rels := h.node.requests("Release")
	if len(rels) != 1 || !rels[0].msg.(*leaseholdv1.ReleaseRequest).GetLost() {
		t.Fatalf("releases %v, want one, as lost", rels)
	}
}

// Live leases a heartbeat reply lists as unnamed are released, except one
// granted to the acquire still in flight, whose answer will bring it.
func TestWorkerReleasesUnnamedLeases(t *testing.T) {
	h := newWorkerHarness(t)
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": newBlockingHandler().handle}})
	waitFor(t, "the acquire to park", func() bool { return h.node.count("Acquire") == 1 })
	inFlight := h.node.requests("Acquire")[0].msg.(*leaseholdv1.AcquireRequest).GetRequestId()

	h.mu.Lock()
	h.unnamed = []*leaseholdv1.Lease{
		{Token: 81, JobId: "lost-reply", WorkerId: workerID, RequestId: "an-earlier-acquire"},
		{Token: 82, JobId: "in-flight", WorkerId: workerID, RequestId: inFlight},
	}
	h.mu.Unlock()
	h.waitTimerAt(renew)
	h.advanceTo(renew)
	waitFor(t, "the release", func() bool { return len(h.released()) == 1 })
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := h.released(); !slices.Equal(got, []uint64{81}) {
		t.Fatalf("released %v, want only 81", got)
	}
	rel := h.node.requests("Release")[0].msg.(*leaseholdv1.ReleaseRequest)
	if rel.GetJobId() != "lost-reply" || rel.GetWorkerId() != workerID {
		t.Fatalf("release %v", rel)
	}
}

// Handler errors and panics report failures (retryable when marked); a job
// of a kind without a handler is released.
func TestWorkerHandlerOutcomes(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("fail", "fail", 91, "")
	h.grants <- grant("retry", "retry", 92, "")
	h.grants <- grant("panic", "panic", 93, "")
	h.grants <- grant("wrapped", "wrapped", 94, "")
	h.grants <- grant("explicit", "explicit", 95, "")
	h.grants <- grant("orphan", "unknown-kind", 96, "")
	h.grants <- grant("snooze", "snooze", 97, "")
	h.grants <- grant("later", "later", 98, "")
	w := h.run(client.WorkerOptions{
		Concurrency: 8,
		Handlers: map[string]client.Handler{
			"fail": func(context.Context, *client.Job) (client.Result, error) {
				return client.Result{Ref: "partial"}, errors.New("boom")
			},
			"retry": func(context.Context, *client.Job) (client.Result, error) {
				return client.Result{}, client.Retryable(errors.New("flaky"))
			},
			"panic": func(context.Context, *client.Job) (client.Result, error) {
				panic("oops")
			},
			"wrapped": func(context.Context, *client.Job) (client.Result, error) {
				return client.Result{}, fmt.Errorf("try later: %w", client.ErrRetryable)
			},
			"explicit": func(context.Context, *client.Job) (client.Result, error) {
				return client.Result{Outcome: leaseholdv1.Outcome_OUTCOME_FAILED, Retryable: true, Message: "said so"}, nil
			},
			"snooze": func(context.Context, *client.Job) (client.Result, error) {
				return client.Result{}, client.Snooze(90 * time.Second)
			},
			"later": func(context.Context, *client.Job) (client.Result, error) {
				return client.Result{Outcome: leaseholdv1.Outcome_OUTCOME_FAILED, Retryable: true, Message: "not yet",
					RetryAfter: time.Minute}, nil
			},
		},
	})
	waitFor(t, "seven reports and a release", func() bool { return len(h.reports()) == 7 && len(h.released()) == 1 })
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := map[uint64]struct {
		retryable  bool
		message    string
		ref        string
		retryAfter time.Duration
	}{
		91: {false, "boom", "partial", 0},
		92: {true, "flaky", "", 0},
		93: {false, "handler panicked: oops", "", 0},
		94: {true, "try later: retryable", "", 0},
		95: {true, "said so", "", 0},
		97: {true, "snoozed for 1m30s", "", 90 * time.Second},
		98: {true, "not yet", "", time.Minute},
	}
	for _, r := range h.reports() {
		w := want[r.GetToken()]
		if r.GetOutcome() != leaseholdv1.Outcome_OUTCOME_FAILED || r.GetRetryable() != w.retryable || r.GetMessage() != w.message ||
			r.GetRef() != w.ref || r.GetRetryAfter().AsDuration() != w.retryAfter {
			t.Errorf("report %v, want failed, retryable %v, message %q, ref %q, retry after %s", r, w.retryable, w.message, w.ref, w.retryAfter)
		}
	}
	if got := h.released(); !slices.Equal(got, []uint64{96}) {
		t.Fatalf("released %v, want the job without a handler", got)
	}
}

// A report that meets a leader change is retried with the same report id;
// a stale answer ends the task without more retries.
func TestWorkerReportRetriesWithOneID(t *testing.T) {
	h := newWorkerHarness(t)
	h.node.script("Report", &leaseholdv1.ReportResponse{}, reasonErr("NO_LEADER", nil), reasonErr("OUTCOME_UNKNOWN", nil))
	h.grants <- grant("j1", "k", 101, "")
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": func(context.Context, *client.Job) (client.Result, error) {
		return client.Result{Ref: "r"}, nil
	}}})
	waitFor(t, "three report attempts", func() bool { return len(h.reports()) == 3 })
	waitFor(t, "the worker to ask for more", func() bool { return h.node.count("Acquire") == 2 })
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rs := h.reports()
	if id := rs[0].GetReportId(); id == "" || rs[1].GetReportId() != id || rs[2].GetReportId() != id {
		t.Fatalf("report ids %q %q %q: want one", rs[0].GetReportId(), rs[1].GetReportId(), rs[2].GetReportId())
	}
}

func TestWorkerStaleReportIsDropped(t *testing.T) {
	h := newWorkerHarness(t)
	h.node.script("Report", nil, reasonErr("STALE_TOKEN", nil))
	h.grants <- grant("j1", "k", 111, "")
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": func(context.Context, *client.Job) (client.Result, error) {
		return client.Result{}, nil
	}}})
	waitFor(t, "the worker to ask for more", func() bool { return h.node.count("Acquire") == 2 })
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(h.reports()); n != 1 {
		t.Fatalf("%d report attempts, want 1", n)
	}
	if len(h.released()) != 0 {
		t.Fatalf("released %v", h.released())
	}
}

func TestNewWorkerValidates(t *testing.T) {
	h := newWorkerHarness(t)
	ok := map[string]client.Handler{"k": newBlockingHandler().handle}
	for name, opts := range map[string]client.WorkerOptions{
		"no client":          {ID: "w", Handlers: ok},
		"no id":              {Client: h.client, Handlers: ok},
		"id with space":      {Client: h.client, ID: "w 1", Handlers: ok},
		"no handlers":        {Client: h.client, ID: "w"},
		"nil handler":        {Client: h.client, ID: "w", Handlers: map[string]client.Handler{"k": nil}},
		"kind without":       {Client: h.client, ID: "w", Handlers: ok, Kinds: []string{"other"}},
		"bad queue":          {Client: h.client, ID: "w", Handlers: ok, Queues: []string{"a/b"}},
		"negative conc":      {Client: h.client, ID: "w", Handlers: ok, Concurrency: -1},
		"poll wait too long": {Client: h.client, ID: "w", Handlers: ok, PollWait: 2 * time.Minute},
		"negative drain":     {Client: h.client, ID: "w", Handlers: ok, DrainTimeout: -time.Second},
	} {
		if _, err := client.NewWorker(opts); !errors.Is(err, client.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestWorkerRunsOnce(t *testing.T) {
	h := newWorkerHarness(t)
	w := h.newWorker(client.WorkerOptions{Handlers: map[string]client.Handler{"k": newBlockingHandler().handle}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitFor(t, "the worker to register", func() bool { return h.node.count("RegisterWorker") == 1 })
	if err := w.Run(context.Background()); !errors.Is(err, client.ErrWorkerRunning) {
		t.Fatalf("second Run: %v", err)
	}
	cancel()
	if err := recv(t, "Run to return", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A registration the cluster refuses for good ends Run with the error.
func TestWorkerRegisterRefused(t *testing.T) {
	h := newWorkerHarness(t)
	h.node.script("RegisterWorker", nil, reasonErr("PERMISSION_DENIED", nil))
	w := h.newWorker(client.WorkerOptions{Handlers: map[string]client.Handler{"k": newBlockingHandler().handle}})
	if err := w.Run(context.Background()); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("Run: %v, want permission denied", err)
	}
}

// A heartbeat answered UNKNOWN_WORKER (an operator deregistered the worker)
// makes the worker register again; it is not an acknowledgement.
func TestWorkerRegistersAgainWhenUnknown(t *testing.T) {
	h := newWorkerHarness(t)
	var once sync.Once
	h.node.on("Heartbeat", func(ctx context.Context, msg proto.Message, hdr http.Header) (proto.Message, error) {
		var err error
		once.Do(func() { err = reasonErr("UNKNOWN_WORKER", nil)() })
		if err != nil {
			return nil, err
		}
		return h.heartbeat(ctx, msg, hdr)
	})
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": newBlockingHandler().handle}})
	h.waitTimerAt(renew)
	h.advanceTo(renew)
	waitFor(t, "a second registration", func() bool { return h.node.count("RegisterWorker") == 2 })
	// The self-stop deadline did not move: it still counts from the start.
	h.waitTimerAt(toleration - 2*renew)
	if slices.Contains(h.clock.Deadlines(), h.start.Add(renew+toleration-2*renew)) {
		t.Fatalf("self-stop timer moved as if acknowledged (armed: %v)", h.offsets())
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// WorkerOptions.Deadline is told the self-stop deadline at registration,
// before any job starts, and again at every acknowledged heartbeat, each
// from the send time of what was acknowledged.
func TestWorkerPublishesDeadline(t *testing.T) {
	h := newWorkerHarness(t)
	deadlines := make(chan time.Time, 16)
	h.grants <- grant("j1", "k", 61, "")
	b := newBlockingHandler()
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": b.handle},
		Deadline: func(d time.Time) { deadlines <- d }})

	first := recv(t, "the deadline of the registration", deadlines)
	if want := h.start.Add(toleration - 2*renew); !first.Equal(want) {
		t.Fatalf("deadline at registration start+%v, want start+%v", first.Sub(h.start), want.Sub(h.start))
	}
	recv(t, "the handler to start", b.started)

	h.waitTimerAt(renew)
	h.advanceTo(renew) // the first heartbeat, acknowledged at once
	if got, want := recv(t, "the deadline of the first ack", deadlines), h.start.Add(renew+toleration-2*renew); !got.Equal(want) {
		t.Fatalf("deadline after the first ack start+%v, want start+%v", got.Sub(h.start), want.Sub(h.start))
	}
	if err := h.stopDraining(w, client.DefaultDrainTimeout); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A kill after a cancel reaches a handler still stopping gracefully:
// Killed(ctx) closes, though ctx ended with the cancel.
func TestWorkerKillAfterCancel(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("j1", "k", 71, "")
	started, cancelled, killed := make(chan struct{}), make(chan error, 1), make(chan struct{})
	handler := func(ctx context.Context, j *client.Job) (client.Result, error) {
		close(started)
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		select {
		case <-client.Killed(ctx):
			close(killed)
			return client.Result{Outcome: leaseholdv1.Outcome_OUTCOME_KILLED}, nil
		case <-time.After(20 * time.Second):
			return client.Result{Outcome: leaseholdv1.Outcome_OUTCOME_CANCELLED}, nil
		}
	}
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": handler}})
	recv(t, "the handler to start", started)
	if client.Killed(context.Background()) != nil {
		t.Fatal("Killed of a context that is not a handler's is not nil")
	}

	h.setVerdict(71, leaseholdv1.Verdict_VERDICT_STOP, leaseholdv1.Revoke_REVOKE_CANCEL)
	h.waitTimerAt(renew)
	h.advanceTo(renew)
	var rev *client.RevokedError
	if cause := recv(t, "the cancel", cancelled); !errors.As(cause, &rev) || rev.Kill {
		t.Fatalf("cause %v, want a cancel", cause)
	}
	select {
	case <-killed:
		t.Fatal("killed on a cancel")
	default:
	}

	h.setVerdict(71, leaseholdv1.Verdict_VERDICT_STOP, leaseholdv1.Revoke_REVOKE_KILL)
	h.waitTimerAt(2 * renew)
	h.advanceTo(2 * renew)
	recv(t, "the kill", killed)
	waitFor(t, "the report", func() bool { return len(h.reports()) == 1 })
	if r := h.reports()[0]; r.GetOutcome() != leaseholdv1.Outcome_OUTCOME_KILLED {
		t.Fatalf("report %v, want killed", r)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A snooze the cluster cannot apply yet (UPGRADE_REQUIRED while a voter is
// below level 5), or a node of an older build refuses (unknown field 9), is
// reported again as a plain retryable failure under the same report id, not
// dropped: a dropped report left the lease to be released, the job requeued
// at once with no attempt counted, again and again.
func TestWorkerSnoozeFallsBackBelowLevel5(t *testing.T) {
	refusals := map[string]error{
		"upgrading": transport.NewError(transport.ReasonUpgradeRequired, errors.New("upgrade node-3"), nil),
		"old build": transport.NewError(transport.ReasonInvalidArgument, errors.New("proto: unknown field 9"), &leaseholdv1.ErrorDetail{Field: "9"}),
	}
	for mode, refusal := range refusals {
		h := newWorkerHarness(t)
		h.node.on("Report", func(_ context.Context, msg proto.Message, _ http.Header) (proto.Message, error) {
			req := msg.(*leaseholdv1.ReportRequest)
			if req.RetryAfter != nil {
				return nil, refusal
			}
			return &leaseholdv1.ReportResponse{JobId: req.GetJobId(), Token: req.GetToken(), Outcome: req.GetOutcome(),
				State: leaseholdv1.JobState_JOB_STATE_QUEUED, Requeued: true}, nil
		})
		h.grants <- grant("snoozer", "k", 81, "")
		w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{
			"k": func(context.Context, *client.Job) (client.Result, error) {
				return client.Result{}, client.Snooze(time.Minute)
			},
		}})
		waitFor(t, mode+": the report and its plain retry", func() bool { return len(h.reports()) == 2 })
		if err := w.stop(); err != nil {
			t.Fatalf("%s: Run: %v", mode, err)
		}
		first, second := h.reports()[0], h.reports()[1]
		if first.GetRetryAfter().AsDuration() != time.Minute || second.RetryAfter != nil || !second.GetRetryable() ||
			second.GetReportId() != first.GetReportId() {
			t.Fatalf("%s: reports %v then %v; want the snooze, then the same report id retryable without it", mode, first, second)
		}
		if got := h.released(); len(got) != 0 {
			t.Fatalf("%s: released %v: the lease was dropped", mode, got)
		}
	}
}

// A busy worker takes its next job in the report that ends the last
// (ReportRequest.next): the acquire loop, waiting for room, sends nothing.
// A heartbeat answered while that report is in flight says the reported
// lease is lost (the report ended it) and lists the next lease as unnamed,
// granted to the report's acquire: the report is not cancelled, the lease
// is kept, not released, and runs once the answer brings it. A server from before next
// answers without one: the loop acquires as before.
func TestWorkerTakesTheNextJobInItsReport(t *testing.T) {
	h := newWorkerHarness(t)
	hold, secondReport := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var nexts []*leaseholdv1.AcquireRequest
	h.node.on("Report", func(_ context.Context, msg proto.Message, _ http.Header) (proto.Message, error) {
		req := msg.(*leaseholdv1.ReportRequest)
		resp := &leaseholdv1.ReportResponse{JobId: req.GetJobId(), Token: req.GetToken(), Outcome: req.GetOutcome(),
			State: leaseholdv1.JobState_JOB_STATE_REPORTED}
		mu.Lock()
		nexts = append(nexts, req.GetNext())
		first := len(nexts) == 1
		if len(nexts) == 2 {
			close(secondReport)
		}
		mu.Unlock()
		if first && req.GetNext() != nil {
			// j2 goes to the report's acquire; a heartbeat sees it first.
			h.mu.Lock()
			h.unnamed = []*leaseholdv1.Lease{{Token: 12, JobId: "j2", WorkerId: workerID, RequestId: req.GetNext().GetRequestId()}}
			h.mu.Unlock()
			<-hold
			resp.Next = &leaseholdv1.AcquireResponse{Grants: []*leaseholdv1.Grant{grant("j2", "k", 12, "")}}
		}
		return resp, nil
	})
	ran := make(chan string, 4)
	h.grants <- grant("j1", "k", 11, "")
	// The worker logs j1's report once answered, before j1's task has left
	// it. Held there until j2's report is sent, j2's report must still see
	// a free slot: j1's, answered (it failed so: "report 2 carried next
	// <nil>").
	gate := writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), "reported") && strings.Contains(string(p), "job_id=j1") {
			select {
			case <-secondReport:
			case <-time.After(5 * time.Second):
			}
		}
		return len(p), nil
	})
	logger := hclog.New(&hclog.LoggerOptions{Name: "worker", Output: gate, Level: hclog.Info})
	w := h.run(client.WorkerOptions{Logger: logger, Handlers: map[string]client.Handler{"k": func(_ context.Context, job *client.Job) (client.Result, error) {
		ran <- job.ID
		return client.Result{}, nil
	}}})
	if id := recv(t, "j1 to run", ran); id != "j1" {
		t.Fatalf("ran %s, want j1", id)
	}
	waitFor(t, "j1's report", func() bool { return len(h.reports()) == 1 })
	// The beat finds j1's lease ended, by the report it has not answered.
	h.setVerdict(11, leaseholdv1.Verdict_VERDICT_LOST, leaseholdv1.Revoke_REVOKE_NONE)
	h.waitTimerAt(renew)
	h.advanceTo(renew)
	waitFor(t, "a heartbeat listing j2 unnamed", func() bool { return h.node.count("Heartbeat") >= 1 })
	close(hold)
	if id := recv(t, "j2 to run", ran); id != "j2" {
		t.Fatalf("ran %s, want j2", id)
	}
	waitFor(t, "j2's report", func() bool { return len(h.reports()) == 2 })
	waitFor(t, "the loop's acquire once j2's report brought nothing", func() bool { return h.node.count("Acquire") >= 2 })
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := h.released(); len(got) != 0 {
		t.Fatalf("released %v: the lease granted to the report's acquire was taken for unknown", got)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, n := range nexts {
		if n == nil || n.GetRequestId() == "" || !n.GetStart() || n.GetMax() != 1 || n.GetWorkerId() != workerID ||
			!slices.Equal(n.GetQueues(), []string{client.DefaultQueue}) {
			t.Fatalf("report %d carried next %v; want an acquire of one lease for the worker, started", i+1, n)
		}
	}
	if n := h.node.count("Acquire"); n != 2 {
		// The first, which took j1, and the one after j2's report brought
		// nothing; none between.
		t.Fatalf("%d acquire calls, want 2", n)
	}
}

// A node of a build from before ReportRequest.next refuses the field,
// having applied nothing: the report goes again alone, its answer has no
// Next, and for a while the client sends reports without next.
func TestReportNextFallsBackOnAnOlderServer(t *testing.T) {
	n := newFakeNode(t)
	n.on("Report", func(_ context.Context, msg proto.Message, _ http.Header) (proto.Message, error) {
		req := msg.(*leaseholdv1.ReportRequest)
		if req.Next != nil {
			return nil, transport.NewError(transport.ReasonInvalidArgument,
				errors.New("unknown field number 10 of leasehold.v1.ReportRequest"), &leaseholdv1.ErrorDetail{Field: "10"})
		}
		return &leaseholdv1.ReportResponse{JobId: req.GetJobId(), Token: req.GetToken(), Outcome: req.GetOutcome()}, nil
	})
	c := newClient(t, n.addr)
	for i, job := range []string{"a", "b"} {
		req := &leaseholdv1.ReportRequest{WorkerId: "w", JobId: job, Token: uint64(i + 1), Outcome: leaseholdv1.Outcome_OUTCOME_SUCCEEDED,
			Next: &leaseholdv1.AcquireRequest{Queues: []string{"q"}}}
		resp, err := c.Report(context.Background(), req)
		if err != nil || resp.GetJobId() != job || resp.Next != nil {
			t.Fatalf("report %s: %v, %v; want its answer without next", job, resp, err)
		}
		if req.Next == nil || req.Next.GetRequestId() == "" {
			t.Fatalf("report %s: the caller's next %v was changed or not given an id", job, req.Next)
		}
	}
	var sent []string
	for _, r := range n.requests("Report") {
		m := r.msg.(*leaseholdv1.ReportRequest)
		sent = append(sent, fmt.Sprintf("%s next=%v", m.GetJobId(), m.Next != nil))
	}
	if want := []string{"a next=true", "a next=false", "b next=false"}; !slices.Equal(sent, want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
}

// writerFunc is an io.Writer made of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// An answer to a beat sent while the worker held a lease, arriving after
// the worker reported it, may list the lease unnamed (the leader answered
// from before the report): the worker held it, so it does not release it.
// (TestWorkerTakesTheNextJobInItsReport met this now and then: its first
// beat's answer came after the next job had run and been reported.)
func TestLateBeatAnswerDoesNotReleaseAnEndedLease(t *testing.T) {
	h := newWorkerHarness(t)
	reported, beatSent := make(chan struct{}), make(chan struct{})
	var once, sentOnce sync.Once
	h.node.on("Report", func(_ context.Context, msg proto.Message, _ http.Header) (proto.Message, error) {
		req := msg.(*leaseholdv1.ReportRequest)
		once.Do(func() { close(reported) })
		return &leaseholdv1.ReportResponse{JobId: req.GetJobId(), Token: req.GetToken(), Outcome: req.GetOutcome(),
			State: leaseholdv1.JobState_JOB_STATE_REPORTED}, nil
	})
	h.node.on("Heartbeat", func(ctx context.Context, msg proto.Message, hd http.Header) (proto.Message, error) {
		sentOnce.Do(func() { close(beatSent) })
		select {
		case <-reported:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		resp, err := h.heartbeat(ctx, msg, hd)
		if err == nil {
			resp.(*leaseholdv1.HeartbeatResponse).Unnamed = []*leaseholdv1.Lease{{Token: 11, JobId: "j1", WorkerId: workerID}}
		}
		return resp, err
	})
	acked := make(chan struct{}, 1)
	logs := writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), "heartbeat acknowledged") {
			select {
			case acked <- struct{}{}:
			default:
			}
		}
		return len(p), nil
	})
	h.grants <- grant("j1", "k", 11, "")
	w := h.run(client.WorkerOptions{Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}),
		Handlers: map[string]client.Handler{"k": func(context.Context, *client.Job) (client.Result, error) {
			<-beatSent // the beat names the lease
			return client.Result{}, nil
		}}})
	h.waitTimerAt(renew)
	h.advanceTo(renew)
	recv(t, "the late beat's answer applied", acked)
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := h.released(); len(got) != 0 {
		t.Fatalf("released %v: a lease the worker held when its beat was sent, then reported", got)
	}
	if n := len(h.reports()); n != 1 {
		t.Fatalf("%d reports, want j1's", n)
	}
}
