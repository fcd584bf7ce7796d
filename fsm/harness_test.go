package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// machine drives an FSM the way a replica does: every command goes through
// Encode and Apply with the next index, and the invariants are checked after
// every step.
type machine struct {
	t     testing.TB
	f     *FSM
	index uint64
	now   int64 // leader time stamped on the next command
}

func newMachine(t testing.TB) *machine {
	return &machine{t: t, f: New(), now: 1_000_000_000}
}

// try applies a command and returns its result and error.
func (m *machine) try(c Command) (any, error) {
	m.t.Helper()
	data, err := Encode(m.now, c)
	if err != nil {
		return nil, err
	}
	m.index++
	res, err := m.f.Apply(m.index, data)
	if ierr := m.f.CheckInvariants(); ierr != nil {
		m.t.Fatalf("invariants after %T: %v", c, ierr)
	}
	return res, err
}

// do applies a command that must succeed.
func (m *machine) do(c Command) any {
	m.t.Helper()
	res, err := m.try(c)
	if err != nil {
		m.t.Fatalf("%T: %v", c, err)
	}
	return res
}

// fail applies a command that must fail with want.
func (m *machine) fail(c Command, want error) {
	m.t.Helper()
	if _, err := m.try(c); !errors.Is(err, want) {
		m.t.Fatalf("%T: got error %v, want %v", c, err, want)
	}
}

func (m *machine) advance(ns int64) { m.now += ns }

func spec(id string) JobSpec {
	return JobSpec{ID: id, Queue: "default", Kind: "eval", Payload: []byte("p-" + id),
		MaxAttempts: 3, OnWorkerLost: LostRequeue, MaxWorkerLosses: 3}
}

func (m *machine) submit(s JobSpec) Job {
	m.t.Helper()
	return m.do(&SubmitJob{Spec: s}).(SubmitResult).Job
}

func (m *machine) register(worker string, capacity uint32) {
	m.t.Helper()
	m.do(&RegisterWorker{WorkerID: worker, Capacity: capacity})
}

var requestCounter int

// acquire takes up to max leases for worker from the default queue.
func (m *machine) acquire(worker string, max uint32) []Grant {
	m.t.Helper()
	requestCounter++
	return m.do(&Acquire{WorkerID: worker, RequestID: fmt.Sprintf("req-%d", requestCounter),
		Queues: []string{"default"}, Max: max}).(AcquireResult).Grants
}

// acquireOne takes exactly one lease.
func (m *machine) acquireOne(worker string) Grant {
	m.t.Helper()
	g := m.acquire(worker, 1)
	if len(g) != 1 {
		m.t.Fatalf("acquire by %s granted %d leases, want 1", worker, len(g))
	}
	return g[0]
}

func (m *machine) report(g Grant, reportID string, o Outcome, retryable bool) ReportResult {
	m.t.Helper()
	return m.do(&Report{WorkerID: g.Lease.WorkerID, JobID: g.Job.ID, Token: g.Lease.Token,
		ReportID: reportID, Outcome: o, Retryable: retryable, Ref: "ref-" + reportID}).(ReportResult)
}

func (m *machine) job(id string) Job {
	m.t.Helper()
	j, err := m.f.Job(id)
	if err != nil {
		m.t.Fatal(err)
	}
	return j
}

// lastEvent returns the newest event of a type.
func (m *machine) lastEvent(typ EventType) (Event, bool) {
	page := m.f.Events(0, MaxPageSize)
	for i := len(page.Events) - 1; i >= 0; i-- {
		if page.Events[i].Type == typ {
			return page.Events[i], true
		}
	}
	return Event{}, false
}

// roundTrip snapshots the machine's state, restores it into a fresh FSM,
// checks the hashes agree and continues on the restored copy.
func (m *machine) roundTrip() {
	m.t.Helper()
	var buf bytes.Buffer
	snap := m.f.Snapshot()
	defer snap.Release()
	if _, err := snap.WriteTo(&buf); err != nil {
		m.t.Fatal(err)
	}
	g := New()
	if err := g.Restore(&buf); err != nil {
		m.t.Fatalf("restore: %v", err)
	}
	if m.f.Hash() != g.Hash() {
		m.t.Fatal("restored state hashes differently")
	}
	m.f = g
}
