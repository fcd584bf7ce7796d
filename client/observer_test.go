package client_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/client"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// observed is one call an Observer saw, with how it ended.
type observed struct {
	method string
	req    proto.Message
	resp   proto.Message
	err    error
	ended  bool
}

// callLog is an Observer that keeps everything it is told.
type callLog struct {
	mu       sync.Mutex
	calls    []*observed
	acks     []time.Time
	stops    []time.Time
	finished chan string // the method of every call that ended
}

func newCallLog() *callLog { return &callLog{finished: make(chan string, 256)} }

func (l *callLog) observer() client.Observer {
	return client.Observer{
		Call: func(method string, req proto.Message) func(proto.Message, error) {
			o := &observed{method: method, req: req}
			l.mu.Lock()
			l.calls = append(l.calls, o)
			l.mu.Unlock()
			return func(resp proto.Message, err error) {
				l.mu.Lock()
				o.resp, o.err, o.ended = resp, err, true
				l.mu.Unlock()
				l.finished <- method
			}
		},
		Acknowledged: func(sent time.Time) {
			l.mu.Lock()
			l.acks = append(l.acks, sent)
			l.mu.Unlock()
		},
		SelfStopped: func(deadline time.Time) {
			l.mu.Lock()
			l.stops = append(l.stops, deadline)
			l.mu.Unlock()
		},
	}
}

// ended returns the calls of method that have ended.
func (l *callLog) ended(method string) []observed {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []observed
	for _, o := range l.calls {
		if o.method == method && o.ended {
			out = append(out, *o)
		}
	}
	return out
}

func (l *callLog) acked() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acks)
}

// The Observer sees every call of a job's life with its request and its
// answer, and the send time of every acknowledgement the self-stop deadline
// counts from: registration, then each acknowledged heartbeat.
func TestObserverSeesCallsAndAcks(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("j1", "k", 61, "")
	log := newCallLog()
	finish := make(chan struct{})
	var closeFinish sync.Once
	w := h.run(client.WorkerOptions{
		Observer: log.observer(),
		Handlers: map[string]client.Handler{"k": func(ctx context.Context, job *client.Job) (client.Result, error) {
			<-finish
			return client.Result{Ref: "r1"}, nil
		}},
	})
	// Registered after run's cleanup, so it runs first: a failed test
	// still lets the handler return.
	t.Cleanup(func() { closeFinish.Do(func() { close(finish) }) })
	waitFor(t, "the grant to be observed", func() bool { return len(log.ended("Acquire")) == 1 })
	if acks := log.acked(); len(acks) != 1 || !acks[0].Equal(h.start) {
		t.Fatalf("acknowledgements %v, want the registration's send time %v", acks, h.start)
	}
	reg := log.ended("RegisterWorker")
	if len(reg) != 1 || reg[0].err != nil || reg[0].req.(*leaseholdv1.RegisterWorkerRequest).GetWorkerId() != workerID ||
		reg[0].resp.(*leaseholdv1.RegisterWorkerResponse).GetTimings().GetRenew().AsDuration() != renew {
		t.Fatalf("register observed as %+v", reg)
	}
	acq := log.ended("Acquire")[0]
	if g := acq.resp.(*leaseholdv1.AcquireResponse).GetGrants(); len(g) != 1 || g[0].GetLease().GetToken() != 61 ||
		acq.req.(*leaseholdv1.AcquireRequest).GetRequestId() == "" {
		t.Fatalf("acquire observed as %+v", acq)
	}

	h.waitTimerAt(renew)
	h.advanceTo(renew)
	// The call ends (and is observed) before its acknowledgement is applied.
	waitFor(t, "the heartbeat to be acknowledged", func() bool { return len(log.acked()) == 2 })
	hb := log.ended("Heartbeat")[0]
	if refs := hb.req.(*leaseholdv1.HeartbeatRequest).GetLeases(); len(refs) != 1 || refs[0].GetToken() != 61 {
		t.Fatalf("heartbeat request %v", hb.req)
	}
	if st := hb.resp.(*leaseholdv1.HeartbeatResponse).GetLeases(); len(st) != 1 || st[0].GetVerdict() != leaseholdv1.Verdict_VERDICT_KEEP {
		t.Fatalf("heartbeat answer %v", hb.resp)
	}
	if acks := log.acked(); len(acks) != 2 || !acks[1].Equal(h.start.Add(renew)) {
		t.Fatalf("acknowledgements %v, want the heartbeat's send time start+%v second", acks, renew)
	}

	closeFinish.Do(func() { close(finish) })
	waitFor(t, "the report to be observed", func() bool { return len(log.ended("Report")) == 1 })
	rep := log.ended("Report")[0]
	req := rep.req.(*leaseholdv1.ReportRequest)
	if req.GetToken() != 61 || req.GetReportId() == "" || req.GetRef() != "r1" || rep.err != nil ||
		rep.resp.(*leaseholdv1.ReportResponse).GetState() != leaseholdv1.JobState_JOB_STATE_REPORTED {
		t.Fatalf("report observed as %+v", rep)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A failed call ends with its error and a nil response; a self-stop is
// announced with its deadline before the handler is cancelled.
func TestObserverSeesFailuresAndSelfStop(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("j1", "k", 71, "")
	log := newCallLog()
	var stopsAtCancel []time.Time
	b := newBlockingHandler()
	w := h.run(client.WorkerOptions{
		Observer: log.observer(),
		Handlers: map[string]client.Handler{"k": func(ctx context.Context, job *client.Job) (client.Result, error) {
			b.started <- job
			<-ctx.Done()
			log.mu.Lock()
			stopsAtCancel = slices.Clone(log.stops)
			log.mu.Unlock()
			b.causes <- context.Cause(ctx)
			return client.Result{}, ctx.Err()
		}},
	})
	recv(t, "the handler to start", b.started)
	h.setHeartbeatFail(true)
	deadline := toleration - 2*renew
	for at := renew; at < deadline; at += renew {
		h.waitTimerAt(at)
		h.advanceTo(at)
	}
	h.waitTimerAt(deadline)
	h.advanceTo(deadline)
	if cause := recv(t, "the self-stop", b.causes); !errors.Is(cause, client.ErrLeaseLost) {
		t.Fatalf("cause %v", cause)
	}
	if len(stopsAtCancel) != 1 || !stopsAtCancel[0].Equal(h.start.Add(deadline)) {
		t.Fatalf("self-stops seen by the cancelled handler %v, want [start+%v]", stopsAtCancel, deadline)
	}
	for _, hb := range log.ended("Heartbeat") {
		if hb.err == nil || hb.resp != nil {
			t.Fatalf("a failed heartbeat observed with resp %v, err %v", hb.resp, hb.err)
		}
	}
	if len(log.acked()) != 1 {
		t.Fatalf("acknowledgements %v: no heartbeat was acknowledged", log.acked())
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
