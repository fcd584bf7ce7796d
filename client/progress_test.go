package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/client"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

// Middleware wraps every handler, the first outermost, and what it
// returns is what the worker reports.
func TestWorkerMiddlewareOrder(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("j1", "echo", 11, "p1")
	var mu sync.Mutex
	var calls []string
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, s)
	}
	named := func(name string) client.Middleware {
		return func(next client.Handler) client.Handler {
			return func(ctx context.Context, job *client.Job) (client.Result, error) {
				record(name + " before")
				res, err := next(ctx, job)
				record(name + " after")
				res.Ref += "+" + name
				return res, err
			}
		}
	}
	w := h.run(client.WorkerOptions{
		Middleware: []client.Middleware{named("outer"), named("inner")},
		Handlers: map[string]client.Handler{"echo": func(_ context.Context, job *client.Job) (client.Result, error) {
			record("handler " + job.ID)
			return client.Result{Ref: "ref"}, nil
		}},
	})
	waitFor(t, "the report", func() bool { return len(h.reports()) == 1 })
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []string{"outer before", "inner before", "handler j1", "inner after", "outer after"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(calls, want) {
		t.Fatalf("calls %q, want %q", calls, want)
	}
	if ref := h.reports()[0].GetRef(); ref != "ref+inner+outer" {
		t.Fatalf("reported ref %q, want the middleware's result ref+inner+outer", ref)
	}
}

// A handler Reattach returns after a restart runs in the middleware too.
func TestMiddlewareWrapsReattachedHandlers(t *testing.T) {
	h := newWorkerHarness(t)
	h.live = []*leaseholdv1.Grant{grant("again", "k", 91, "")}
	wrapped := make(chan string, 1)
	w := h.run(client.WorkerOptions{
		Handlers: map[string]client.Handler{"k": newBlockingHandler().handle},
		Middleware: []client.Middleware{func(next client.Handler) client.Handler {
			return func(ctx context.Context, j *client.Job) (client.Result, error) {
				wrapped <- j.ID
				return next(ctx, j)
			}
		}},
		Reattach: func(context.Context, *client.Job) (client.Handler, bool) {
			return func(context.Context, *client.Job) (client.Result, error) {
				return client.Result{Ref: "reattached"}, nil
			}, true
		},
	})
	if id := recv(t, "the middleware to run", wrapped); id != "again" {
		t.Fatalf("middleware ran for job %q, want the re-attached one", id)
	}
	waitFor(t, "the report", func() bool { return len(h.reports()) == 1 })
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestNewWorkerRefusesNilMiddleware(t *testing.T) {
	_, err := client.NewWorker(client.WorkerOptions{
		Client: newClient(t, newFakeNode(t).addr), ID: "w",
		Handlers:   map[string]client.Handler{"k": newBlockingHandler().handle},
		Middleware: []client.Middleware{nil},
	})
	if !errors.Is(err, client.ErrInvalidConfig) || !strings.Contains(err.Error(), "Middleware[0]") {
		t.Fatalf("NewWorker: %v, want ErrInvalidConfig naming Middleware[0]", err)
	}
	_, err = client.NewWorker(client.WorkerOptions{
		Client: newClient(t, newFakeNode(t).addr), ID: "w",
		Handlers:   map[string]client.Handler{"k": newBlockingHandler().handle},
		Middleware: []client.Middleware{func(client.Handler) client.Handler { return nil }},
	})
	if !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("NewWorker with a middleware that returns nil: %v, want ErrInvalidConfig", err)
	}
}

// notes returns the progress notes each heartbeat carried, as
// "token=note", sorted, beat by beat.
func (h *workerHarness) notes() [][]string {
	var out [][]string
	for _, r := range h.node.requests("Heartbeat") {
		var beat []string
		for _, n := range r.msg.(*leaseholdv1.HeartbeatRequest).GetNotes() {
			beat = append(beat, fmt.Sprintf("%d=%s", n.GetToken(), n.GetNote()))
		}
		slices.Sort(beat)
		out = append(out, beat)
	}
	return out
}

// acks counts the acknowledgements a worker counts from (registration's
// and each heartbeat's).
type acks struct {
	mu sync.Mutex
	n  int
}

func (a *acks) observer() client.Observer {
	return client.Observer{Acknowledged: func(time.Time) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.n++
	}}
}

func (a *acks) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// beatAt moves the clock to the n-th renew and waits for the heartbeats
// to number beats and the acknowledgements acked (the worker applies an
// answer before it builds the next beat).
func (h *workerHarness) beatAt(a *acks, n, beats, acked int) {
	h.t.Helper()
	h.waitTimerAt(time.Duration(n) * renew)
	h.advanceTo(time.Duration(n) * renew)
	waitFor(h.t, fmt.Sprintf("heartbeat %d", beats), func() bool { return len(h.heartbeats()) >= beats })
	waitFor(h.t, fmt.Sprintf("acknowledgement %d", acked), func() bool { return a.count() >= acked })
}

// A note travels with the next heartbeat once the server said it takes
// notes, and again with each beat until one carrying it is acknowledged;
// the latest note wins, a long one is cut, and no beat goes just for a
// note. A new leader's term holds none of the notes: each lease's latest
// goes again.
func TestProgressTravelsWithTheNextHeartbeat(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("j1", "k", 21, "")
	h.grants <- grant("j2", "k", 22, "")
	b := newBlockingHandler()
	var a acks
	w := h.run(client.WorkerOptions{Concurrency: 2, Handlers: map[string]client.Handler{"k": b.handle}, Observer: a.observer()})
	jobs := map[string]*client.Job{}
	for range 2 {
		j := recv(t, "a handler to start", b.started)
		jobs[j.ID] = j
	}

	// The first beat goes before the worker knows the server takes notes.
	jobs["j1"].Progress("starting")
	h.beatAt(&a, 1, 1, 2)
	jobs["j1"].Progress("step 1")
	jobs["j1"].Progress("step 2\x1b[31m") // the latest wins; control characters become spaces
	h.beatAt(&a, 2, 2, 3)
	h.beatAt(&a, 3, 3, 4)                             // acknowledged: not sent again
	long := strings.Repeat("é", rules.MaxProgressLen) // 2 bytes each
	jobs["j2"].Progress(long)
	h.beatAt(&a, 4, 4, 5)
	h.newTerm()
	h.beatAt(&a, 5, 5, 6) // answered by the new term
	h.beatAt(&a, 6, 6, 7)
	h.beatAt(&a, 7, 7, 8)
	cut := strings.Repeat("é", rules.MaxProgressLen/2)
	want := [][]string{nil, {"21=step 2 [31m"}, nil, {"22=" + cut}, nil, {"21=step 2 [31m", "22=" + cut}, nil}
	if got := h.notes(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("notes by heartbeat %q, want %q", got, want)
	}
	if err := h.stopDraining(w, client.DefaultDrainTimeout); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A leader of a build from before notes refuses a heartbeat carrying one:
// the worker renews again at once without notes and sends none until an
// answer says the server takes them (the upgrade is over). The same on a
// heartbeat stream and with unary heartbeats.
func TestProgressToAServerWithoutNotes(t *testing.T) {
	t.Run("stream", func(t *testing.T) { testProgressWithoutNotes(t, false) })
	t.Run("unary", func(t *testing.T) { testProgressWithoutNotes(t, true) })
}

func testProgressWithoutNotes(t *testing.T, unary bool) {
	h := newWorkerHarness(t)
	if unary {
		h.node.on("HeartbeatStream", func(context.Context, proto.Message, http.Header) (proto.Message, error) {
			return nil, connect.NewError(connect.CodeUnimplemented, errors.New("no such method"))
		})
	}
	h.grants <- grant("j1", "k", 31, "")
	b := newBlockingHandler()
	var a acks
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": b.handle}, Observer: a.observer()})
	job := recv(t, "the handler to start", b.started)

	h.beatAt(&a, 1, 1, 2) // a new leader: notes taken
	job.Progress("half way")
	h.setNoNotes(true)    // the leader moves to a node of an older build
	h.beatAt(&a, 2, 3, 3) // refused for its note, then again at once without
	h.beatAt(&a, 3, 4, 4)
	h.setNoNotes(false)   // the upgrade is over
	h.beatAt(&a, 4, 5, 5) // says notes are taken again
	h.beatAt(&a, 5, 6, 6)
	want := [][]string{nil, {"31=half way"}, nil, nil, nil, {"31=half way"}}
	if got := h.notes(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("notes by heartbeat %q, want %q", got, want)
	}
	if hb := h.heartbeats(); !slices.EqualFunc(hb, [][]uint64{{31}, {31}, {31}, {31}, {31}, {31}}, slices.Equal) {
		t.Fatalf("heartbeats %v: each names the lease", hb)
	}
	if err := h.stopDraining(w, client.DefaultDrainTimeout); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// The notes of many leases are spread over beats, so a heartbeat never
// grows past what a server takes: each beat carries at most 128 notes at
// their longest, and the rest go with the next.
func TestProgressNotesSpreadOverBeats(t *testing.T) {
	const leases = 130
	h := newWorkerHarness(t)
	go func() {
		for i := range leases {
			h.grants <- grant(fmt.Sprintf("j%d", i), "k", uint64(100+i), "")
		}
	}()
	long := strings.Repeat("x", rules.MaxProgressLen)
	var a acks
	var started atomic.Int64
	w := h.run(client.WorkerOptions{Concurrency: leases, Observer: a.observer(),
		Handlers: map[string]client.Handler{"k": func(ctx context.Context, j *client.Job) (client.Result, error) {
			j.Progress(long)
			started.Add(1)
			<-ctx.Done()
			return client.Result{}, ctx.Err()
		}}})
	waitFor(t, "every handler to publish its note", func() bool { return started.Load() == leases })
	h.beatAt(&a, 1, 1, 2)
	h.beatAt(&a, 2, 2, 3)
	h.beatAt(&a, 3, 3, 4)
	notes := h.notes()
	got := map[string]bool{}
	for _, beat := range notes {
		for _, n := range beat {
			if got[n] {
				t.Fatalf("note %.10s... sent twice", n)
			}
			got[n] = true
		}
	}
	if len(notes[1]) != 128 || len(notes[2]) != leases-128 || len(got) != leases {
		t.Fatalf("notes per beat %d, %d, %d; %d leases' notes in all, want 128 then %d, every lease's once",
			len(notes[0]), len(notes[1]), len(notes[2]), len(got), leases-128)
	}
	if err := h.stopDraining(w, client.DefaultDrainTimeout); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
