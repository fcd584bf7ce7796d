package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func (m *machine) setQueue(c *SetQueue) QueueSettings {
	m.t.Helper()
	return m.do(c).(QueueSettings)
}

func pauseQueue(q string, paused bool) *SetQueue {
	return &SetQueue{Queue: q, SetPaused: true, Paused: paused}
}

func limitQueue(q string, max uint32) *SetQueue {
	return &SetQueue{Queue: q, SetMaxRunning: true, MaxRunning: max}
}

func inQueue(id, q string) JobSpec {
	s := spec(id)
	s.Queue = q
	return s
}

// A paused queue grants nothing and counts nothing ready; other queues go
// on; a resume grants again. Pausing keeps the limit, and setting what is
// already set records nothing.
func TestPausedQueueGrantsNothing(t *testing.T) {
	m := newMachine(t)
	m.register("w", 8)
	m.submit(spec("a"))
	m.submit(inQueue("b", "other"))
	m.setQueue(limitQueue("default", 5))
	if got := m.setQueue(pauseQueue("default", true)); !got.Paused || got.MaxRunning != 5 {
		t.Fatalf("paused: %+v, want paused with its limit kept", got)
	}
	if ev, ok := m.lastEvent(EventQueuePaused); !ok || ev.Detail != "default" {
		t.Fatalf("no queue.paused event: %+v", ev)
	}
	both := []string{"default", "other"}
	if n := m.f.Ready(both, nil); n != 1 {
		t.Fatalf("Ready %d, want 1 (the paused queue counts none)", n)
	}
	if n := m.f.ReadyAt([]string{"default"}, nil, m.now+int64(time.Hour)); n != 0 {
		t.Fatalf("ReadyAt of a paused queue: %d", n)
	}
	g := m.do(&Acquire{WorkerID: "w", RequestID: "r1", Queues: both, Max: 4}).(AcquireResult).Grants
	if len(g) != 1 || g[0].Job.ID != "b" {
		t.Fatalf("granted %v, want only b", g)
	}
	events := m.f.Stats().LastEventSeq
	m.setQueue(pauseQueue("default", true))
	if m.f.Stats().LastEventSeq != events {
		t.Fatal("pausing a paused queue recorded an event")
	}
	m.setQueue(pauseQueue("default", false))
	if _, ok := m.lastEvent(EventQueueResumed); !ok {
		t.Fatal("no queue.resumed event")
	}
	if g := m.acquireOne("w"); g.Job.ID != "a" {
		t.Fatalf("granted %s after the resume", g.Job.ID)
	}
	if qs := m.f.QueueSettingsOf(); len(qs) != 1 || qs[0] != (QueueSettings{Queue: "default", MaxRunning: 5}) {
		t.Fatalf("settings %+v, want the limit alone", qs)
	}
	// Back to the defaults: the queue leaves the table.
	m.setQueue(limitQueue("default", 0))
	if ev, ok := m.lastEvent(EventQueueLimited); !ok || ev.Detail != "default: no limit" {
		t.Fatalf("limit event %+v", ev)
	}
	if qs := m.f.QueueSettingsOf(); len(qs) != 0 {
		t.Fatalf("settings %+v after the defaults", qs)
	}
}

// A limit of N holds grants beyond N live leases in the queue until one
// ends, whichever way it ends; lowering it below the live leases ends
// none of them.
func TestQueueLimitHoldsGrants(t *testing.T) {
	m := newMachine(t)
	m.register("w", 8)
	m.register("v", 8)
	for i := range 6 {
		m.submit(spec(fmt.Sprintf("j%d", i)))
	}
	m.setQueue(limitQueue("default", 2))
	if ev, ok := m.lastEvent(EventQueueLimited); !ok || ev.Detail != "default: max running 2" {
		t.Fatalf("limit event %+v", ev)
	}
	q := []string{"default"}
	if n := m.f.Ready(q, nil); n != 2 {
		t.Fatalf("Ready %d under a limit of 2, want 2", n)
	}
	g := m.acquire("w", 4)
	if len(g) != 2 {
		t.Fatalf("granted %d under a limit of 2", len(g))
	}
	if n := m.f.ReadyAt(q, nil, m.now); n != 0 || len(m.acquire("v", 1)) != 0 {
		t.Fatalf("a third grant (ReadyAt %d)", n)
	}
	// Each way a lease ends frees its slot.
	m.report(g[0], "r", OutcomeSucceeded, false)
	g2 := m.acquireOne("v")
	m.do(&Release{WorkerID: "w", JobID: g[1].Job.ID, Token: g[1].Lease.Token})
	g3 := m.acquireOne("v")
	m.do(&Expire{Leases: []LeaseRef{{g2.Job.ID, g2.Lease.Token}}})
	g4 := m.acquireOne("w")
	m.do(&DeregisterWorker{WorkerID: "v"})
	if len(m.acquire("w", 4)) != 1 {
		t.Fatal("the deregistration freed no slot")
	}
	_ = g3
	_ = g4
	// Lowering the limit ends nothing; the next grant waits for two ends.
	m.setQueue(limitQueue("default", 1))
	if st, _ := m.f.Queues("", 0, m.now); st[0].Running != 2 {
		t.Fatalf("running %d after lowering the limit, want 2", st[0].Running)
	}
	if len(m.acquire("w", 1)) != 0 {
		t.Fatal("granted over a lowered limit")
	}
	m.roundTrip()
	if len(m.acquire("w", 1)) != 0 {
		t.Fatal("granted over the limit after a restore")
	}
}

// Queues lists the depth of each queue by state, as of the caller's time,
// its oldest ready job, and its settings, a page at a time.
func TestQueuesListing(t *testing.T) {
	m := newMachine(t)
	m.register("w", 8)
	start := m.now
	m.submit(spec("old"))
	m.advance(int64(time.Second))
	m.submit(spec("new"))
	m.submit(spec("run"))
	m.do(&SubmitJob{Spec: spec("later"), RunAt: m.now + int64(time.Minute)})
	m.submit(inQueue("x", "other"))
	m.setQueue(pauseQueue("empty", true))
	// Priority picks "run" first: the oldest ready job stays "old".
	m.do(&SubmitJob{Spec: func() JobSpec { s := spec("urgent"); s.Priority = 9; return s }()})
	g := m.acquireOne("w")
	m.do(&Cancel{JobID: "new"})

	list, more := m.f.Queues("", 0, m.now)
	if more || len(list) != 3 {
		t.Fatalf("listed %+v (more %t), want default, empty, other", list, more)
	}
	d := list[0]
	if d.Name != "default" || d.Ready != 2 || d.Scheduled != 1 || d.Running != 1 || d.Jobs[JobCancelled] != 1 ||
		d.Jobs[JobQueued] != 3 || d.OldestReady != start || d.Paused || d.MaxRunning != 0 {
		t.Fatalf("default: %+v (granted %s)", d, g.Job.ID)
	}
	if e := list[1]; e.Name != "empty" || !e.Paused || len(e.Jobs) != 0 || e.OldestReady != 0 {
		t.Fatalf("empty: %+v", e)
	}
	// A job due by the caller's time is ready, though no apply promoted it.
	later := m.now + int64(time.Minute)
	list, _ = m.f.Queues("", 1, later)
	if d := list[0]; d.Ready != 3 || d.Scheduled != 0 {
		t.Fatalf("a minute later: %+v", d)
	}
	// Once the oldest leaves, the oldest ready is the next one's time; a
	// due job older than every ready one is the oldest.
	m.do(&Cancel{JobID: "old"})
	list, more = m.f.Queues("", 1, later)
	if !more || len(list) != 1 || list[0].OldestReady != start+int64(time.Second) || list[0].Ready != 2 {
		t.Fatalf("after cancelling the oldest: %+v more %t", list, more)
	}
	m.do(&Cancel{JobID: "run"})
	if list, _ = m.f.Queues("", 1, later); list[0].OldestReady != later || list[0].Ready != 1 {
		t.Fatalf("with only the due job: %+v, oldest want %d", list, later)
	}
	m.do(&SubmitJob{Spec: spec("run2")})
	list, more = m.f.Queues("empty", 1, m.now)
	if more || len(list) != 1 || list[0].Name != "other" {
		t.Fatalf("second page: %+v %t", list, more)
	}
	m.roundTrip()
	again, _ := m.f.Queues("", 0, m.now)
	if again[0].OldestReady != m.now || again[0].Ready != 1 || again[0].Scheduled != 1 {
		t.Fatalf("after a restore: %+v", again[0])
	}
}

func TestSetQueueCodec(t *testing.T) {
	c := &SetQueue{Queue: "q", SetPaused: true, Paused: true, SetMaxRunning: true, MaxRunning: 7}
	data, err := Encode(3, c)
	if err != nil || data[0] != codecV6 || CodecOf(c) != codecV6 {
		t.Fatalf("codec %d (%v), want 6", data[0], err)
	}
	env, err := Decode(data)
	if err != nil || !reflect.DeepEqual(env.Command, c) {
		t.Fatalf("decoded %+v %v", env.Command, err)
	}
	for _, tc := range []struct {
		cmd   *SetQueue
		field string
		want  error
	}{
		{&SetQueue{Queue: "no/slash", SetPaused: true}, "queue", ErrInvalidArgument},
		{&SetQueue{Queue: strings.Repeat("q", MaxNameLen+1), SetPaused: true}, "queue", ErrTooLarge},
		{&SetQueue{Queue: "q"}, "queue", ErrInvalidArgument},
		{&SetQueue{Queue: "q", Paused: true, SetMaxRunning: true}, "paused", ErrInvalidArgument},
		{&SetQueue{Queue: "q", MaxRunning: 3, SetPaused: true}, "max_running", ErrInvalidArgument},
		{&SetQueue{Queue: "q", SetMaxRunning: true, MaxRunning: MaxQueueLimit + 1}, "max_running", ErrInvalidArgument},
	} {
		_, err := Encode(1, tc.cmd)
		var fe *FieldError
		if !errors.Is(err, tc.want) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: got %v, want %v on field %s", tc.cmd, err, tc.want, tc.field)
		}
	}
	// Flags this build does not know are corrupt, not ignored.
	e := encoder{codec: codecV6}
	e.byte1(codecV6)
	e.byte1(uint8(CmdSetQueue))
	e.varint(1)
	e.str("q")
	e.byte1(1 << 5)
	e.uvarint(0)
	if _, err := Decode(seal(e.b)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown flags: %v", err)
	}
}

// The settings table is bounded; a queue set back to the defaults frees
// its place.
func TestQueueSettingsBounded(t *testing.T) {
	m := newMachine(t)
	for i := range MaxQueueSettings {
		m.setQueue(pauseQueue(fmt.Sprintf("q%d", i), true))
	}
	m.fail(pauseQueue("one-more", true), ErrTooLarge)
	m.setQueue(pauseQueue("q0", true)) // no change: no place needed
	m.setQueue(pauseQueue("q0", false))
	m.setQueue(pauseQueue("one-more", true))
}

// Queue settings survive a snapshot (version 6 only); a state without them
// is written in the version the nodes read, and a stream of an older
// version carrying them is corrupt.
func TestQueueSettingsSnapshot(t *testing.T) {
	m := busyMachine(t)
	if v := snapshotBytes(t, m.f)[len(snapMagic)]; v >= 6 {
		t.Fatalf("a state without queue settings written in version %d", v)
	}
	m.setQueue(limitQueue("default", 3))
	m.setQueue(pauseQueue("b", true))
	data := snapshotBytes(t, m.f)
	if v := data[len(snapMagic)]; v != 6 {
		t.Fatalf("queue settings written in version %d", v)
	}
	m.roundTrip()
	want := []QueueSettings{{Queue: "b", Paused: true}, {Queue: "default", MaxRunning: 3}}
	if got := m.f.QueueSettingsOf(); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored settings %+v, want %+v", got, want)
	}
	// The same records in a version 5 stream.
	old := bytes.Clone(data)
	old[len(snapMagic)] = 5
	body := old[:len(old)-4]
	if err := New().Restore(bytes.NewReader(seal(body))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("queue records in a version 5 snapshot: %v", err)
	}
}

// A job queued again became ready when its lease ended, not when it was
// submitted: the queue's oldest ready age is its wait since.
func TestOldestReadyAfterARelease(t *testing.T) {
	m := newMachine(t)
	m.register("w", 1)
	m.submit(spec("a"))
	g := m.acquireOne("w")
	m.advance(int64(5 * time.Second))
	m.do(&Release{WorkerID: "w", JobID: "a", Token: g.Lease.Token})
	if list, _ := m.f.Queues("", 0, m.now); list[0].OldestReady != m.now || list[0].Ready != 1 {
		t.Fatalf("after the release: %+v, oldest want %d", list[0], m.now)
	}
	m.roundTrip()
	if list, _ := m.f.Queues("", 0, m.now); list[0].OldestReady != m.now {
		t.Fatalf("after a restore: %+v", list[0])
	}
}

// A dead job retried became ready at the retry, not when it died (the end
// of its last lease): the queue's oldest ready age and the grant's queue
// wait leave out the time it was dead.
func TestOldestReadyAfterARetry(t *testing.T) {
	m := newMachine(t)
	m.setLevel("a", 6)
	m.register("w", 1)
	m.killDead("w", "d", spec("d").Queue)
	if j := m.job("d"); j.State != JobDead {
		t.Fatalf("not dead: %s", j.State)
	}
	m.advance(int64(30 * 24 * time.Hour))
	m.do(&RetryJob{JobID: "d"})
	retried := m.now
	m.advance(int64(time.Minute))
	if list, _ := m.f.Queues("", 0, m.now); list[0].OldestReady != retried || list[0].Ready != 1 {
		t.Fatalf("after the retry: %+v, oldest want %d (%v after the death)", list[0], retried, time.Duration(retried-list[0].OldestReady))
	}
	m.roundTrip()
	if list, _ := m.f.Queues("", 0, m.now); list[0].OldestReady != retried {
		t.Fatalf("after a restore: %+v", list[0])
	}
	if g := m.acquireOne("w"); g.ReadySince != retried || g.Lease.GrantedAt-g.ReadySince != int64(time.Minute) {
		t.Fatalf("grant ready since %d, want %d", g.ReadySince, retried)
	}
}

// OldestDead is the longest-dead job's death, past retries and restores:
// what the leader's retention purge waits for.
func TestOldestDead(t *testing.T) {
	m := newMachine(t)
	m.setLevel("a", 6)
	m.register("w", 1)
	if _, ok := m.f.OldestDead(); ok {
		t.Fatal("a dead job in an empty state")
	}
	var deaths []int64
	for _, id := range []string{"d1", "d2"} {
		m.killDead("w", id, spec(id).Queue)
		deaths = append(deaths, m.now)
		m.advance(int64(time.Hour))
	}
	if at, ok := m.f.OldestDead(); !ok || at != deaths[0] {
		t.Fatalf("oldest dead at %d, %t; want %d", at, ok, deaths[0])
	}
	m.do(&RetryJob{JobID: "d1"})
	m.roundTrip()
	if at, ok := m.f.OldestDead(); !ok || at != deaths[1] {
		t.Fatalf("after d1's retry: %d, %t; want %d", at, ok, deaths[1])
	}
	m.do(&PurgeJobs{JobIDs: []string{"d2"}, Limit: 1})
	if _, ok := m.f.OldestDead(); ok {
		t.Fatal("none is dead, yet one is oldest")
	}
}
