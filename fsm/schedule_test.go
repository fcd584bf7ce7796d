package fsm

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func schedTemplate() JobSpec {
	s := spec("")
	s.ID, s.Payload = "", []byte("nightly")
	return s
}

func putSched(name string) *PutSchedule {
	return &PutSchedule{Name: name, Cron: "*/5 * * * * *", Zone: "UTC", Missed: MissedSkip, Template: schedTemplate()}
}

// fire proposes a FireSchedule and returns its result.
func (m *machine) fire(name string, slot int64) FireResult {
	m.t.Helper()
	return m.do(&FireSchedule{Name: name, Slot: slot}).(FireResult)
}

func (m *machine) scheduledJobs(name string) []Job {
	jobs, _ := m.f.Jobs(JobFilter{})
	var out []Job
	for _, j := range jobs {
		if strings.HasPrefix(j.ID, name+"@") {
			out = append(out, j)
		}
	}
	return out
}

func (m *machine) eventsOf(typ EventType) []Event {
	var out []Event
	for _, ev := range m.f.Events(0, MaxEvents).Events {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func TestScheduleSlotFiresOnce(t *testing.T) {
	m := newMachine(t)
	res := m.do(putSched("nightly")).(PutScheduleResult)
	if !res.Created || res.Schedule.LastSlot != m.now || res.Schedule.CreatedAt != m.now {
		t.Fatalf("created %+v", res)
	}
	// Results and queries share nothing with the state.
	res.Schedule.Template.Payload[0] = 'X'
	got, _ := m.f.Schedule("nightly")
	got.Template.Payload[1] = 'Y'
	if got, _ := m.f.Schedule("nightly"); string(got.Template.Payload) != "nightly" {
		t.Fatalf("stored template payload became %q", got.Template.Payload)
	}
	m.advance(int64(10 * time.Second))
	slot := m.now - int64(time.Second)
	if r := m.fire("nightly", slot); !r.Fired || r.JobID != ScheduleJobID("nightly", slot) {
		t.Fatalf("first fire: %+v", r)
	}
	// A new leader's retry of the same slot, or a replayed proposal.
	m.advance(1)
	if r := m.fire("nightly", slot); r.Fired || r.Reason != ReasonAlreadyFired {
		t.Fatalf("second fire: %+v", r)
	}
	// An older slot after a newer one changes nothing either.
	if r := m.fire("nightly", slot-int64(5*time.Second)); r.Fired || r.Reason != ReasonAlreadyFired {
		t.Fatalf("older slot: %+v", r)
	}
	jobs := m.scheduledJobs("nightly")
	if len(jobs) != 1 || jobs[0].ID != "nightly@"+time.Unix(0, slot).UTC().Format(time.RFC3339) ||
		!bytes.Equal(jobs[0].Payload, []byte("nightly")) || jobs[0].State != JobQueued {
		t.Fatalf("jobs %+v", jobs)
	}
	if n := len(m.eventsOf(EventScheduleFired)); n != 1 {
		t.Fatalf("%d fired events", n)
	}
	sc, err := m.f.Schedule("nightly")
	if err != nil || sc.LastSlot != slot || sc.Fired != 1 || sc.LastJob != jobs[0].ID {
		t.Fatalf("schedule %+v %v", sc, err)
	}
	// A slot after the leader's own time is refused: no leader proposes one.
	m.fail(&FireSchedule{Name: "nightly", Slot: m.now + 1}, ErrInvalidArgument)
	m.fail(&FireSchedule{Name: "nope", Slot: slot}, ErrNotFound)
}

func TestScheduleSkipSettlesWithoutAJob(t *testing.T) {
	m := newMachine(t)
	m.do(putSched("s"))
	m.advance(int64(time.Hour))
	r := m.do(&FireSchedule{Name: "s", Slot: m.now - int64(time.Minute), Skip: true, Skipped: 700, Reason: "missed"}).(FireResult)
	if r.Fired || r.Reason != "missed" {
		t.Fatalf("skip: %+v", r)
	}
	if jobs := m.scheduledJobs("s"); len(jobs) != 0 {
		t.Fatalf("skip submitted %v", jobs)
	}
	evs := m.eventsOf(EventScheduleSkipped)
	if len(evs) != 1 || !strings.Contains(evs[0].Detail, "700 slots") {
		t.Fatalf("skipped events %+v", evs)
	}
	// Run-latest: one job, the earlier slots counted as skipped.
	m.advance(int64(time.Hour))
	r = m.do(&FireSchedule{Name: "s", Slot: m.now - int64(time.Minute), Skipped: 699, Reason: "missed"}).(FireResult)
	if !r.Fired || len(m.scheduledJobs("s")) != 1 {
		t.Fatalf("run latest: %+v", r)
	}
	if sc, _ := m.f.Schedule("s"); sc.Skipped != 1399 || sc.Fired != 1 {
		t.Fatalf("counts %+v", sc)
	}
}

func TestScheduleDeleteThenRecreateStartsAfresh(t *testing.T) {
	m := newMachine(t)
	m.do(putSched("s"))
	m.advance(int64(time.Minute))
	old := m.now - int64(time.Second)
	m.fire("s", old)
	m.advance(int64(time.Minute))
	m.do(&DeleteSchedule{Name: "s"})
	m.fail(&DeleteSchedule{Name: "s"}, ErrNotFound)
	m.fail(&FireSchedule{Name: "s", Slot: old}, ErrNotFound)
	m.advance(int64(time.Minute))
	res := m.do(putSched("s")).(PutScheduleResult)
	if !res.Created || res.Schedule.LastSlot != m.now || res.Schedule.Fired != 0 {
		t.Fatalf("recreated %+v", res.Schedule)
	}
	// A slot from before the new schedule existed is settled already.
	slot := m.now - int64(30*time.Second)
	if r := m.fire("s", slot); r.Fired {
		t.Fatalf("recreated schedule fired a slot before its creation: %+v", r)
	}
}

func TestSchedulePauseResumeAndUpdate(t *testing.T) {
	m := newMachine(t)
	m.do(putSched("s"))
	m.do(&PutSchedule{Name: "s", PauseOnly: true, Paused: true})
	m.advance(int64(time.Minute))
	if r := m.fire("s", m.now-1); r.Fired || r.Reason != ReasonPaused {
		t.Fatalf("paused fired: %+v", r)
	}
	paused := m.now - 1
	m.advance(int64(time.Minute))
	res := m.do(&PutSchedule{Name: "s", PauseOnly: true, Paused: false}).(PutScheduleResult)
	if res.Schedule.Paused || res.Schedule.LastSlot != m.now {
		t.Fatalf("resumed %+v", res.Schedule)
	}
	// A slot of the pause never fires after the resume.
	if r := m.fire("s", paused); r.Fired {
		t.Fatalf("slot of the pause fired: %+v", r)
	}
	if evs := m.eventsOf(EventSchedulePaused); len(evs) != 2 || evs[1].Detail != "s resumed" {
		t.Fatalf("pause events %+v", evs)
	}
	m.fail(&PutSchedule{Name: "x", PauseOnly: true, Paused: true}, ErrNotFound)

	// A create retried changes nothing; another definition is a conflict
	// unless replaced, and a replace keeps the counts and never moves
	// LastSlot back.
	m.advance(int64(time.Minute))
	if r := m.do(putSched("s")).(PutScheduleResult); r.Changed || r.Created {
		t.Fatalf("same definition changed: %+v", r)
	}
	other := putSched("s")
	other.Cron = "0 * * * *"
	m.fail(other, ErrConflict)
	m.fire("s", m.now-1)
	other.Replace = true
	r := m.do(other).(PutScheduleResult)
	if !r.Changed || r.Created || r.Schedule.Fired != 1 || r.Schedule.LastSlot != m.now || r.Schedule.Cron != "0 * * * *" {
		t.Fatalf("replaced %+v", r)
	}
}

func TestScheduleRefusedSubmitStillSettlesTheSlot(t *testing.T) {
	m := newMachine(t)
	m.do(putSched("s"))
	m.advance(int64(time.Minute))
	slot := m.now - 1
	// Someone took the slot's job id with another spec.
	squatter := spec(ScheduleJobID("s", slot))
	squatter.Kind = "other"
	m.submit(squatter)
	r := m.fire("s", slot)
	if r.Fired || !strings.Contains(r.Reason, "refused") {
		t.Fatalf("fire: %+v", r)
	}
	if sc, _ := m.f.Schedule("s"); sc.LastSlot != slot || sc.Skipped != 1 {
		t.Fatalf("schedule %+v", sc)
	}
	if evs := m.eventsOf(EventScheduleSkipped); len(evs) != 1 || !strings.Contains(evs[0].Detail, "refused") {
		t.Fatalf("events %+v", evs)
	}
}

func TestScheduleSnapshotRoundTrip(t *testing.T) {
	m := busyMachine(t)
	// Without a schedule the snapshot keeps its old version.
	if v := snapshotBytes(t, m.f)[len(snapMagic)]; v >= 6 {
		t.Fatalf("snapshot without schedules written in version %d", v)
	}
	m.do(putSched("b"))
	p := putSched("a")
	p.Template.Retry = &RetryPolicy{Initial: 1e9, Max: 1e10, Multiplier: 2000, Jitter: 5}
	p.Missed, p.Zone = MissedRunLatest, ""
	m.do(p)
	m.do(&PutSchedule{Name: "b", PauseOnly: true, Paused: true})
	m.advance(int64(time.Minute))
	m.fire("a", m.now-1)
	data := snapshotBytes(t, m.f)
	if v := data[len(snapMagic)]; v != 6 {
		t.Fatalf("snapshot with schedules written in version %d", v)
	}
	g := New()
	if err := g.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if g.Hash() != m.f.Hash() || !bytes.Equal(snapshotBytes(t, g), data) {
		t.Fatal("restored state differs")
	}
	a, b := m.f.Schedules(), g.Schedules()
	if len(a) != 2 || len(b) != 2 || a[0].Name != "a" || !sameDefinition(&a[0], &b[0]) || a[0].LastSlot != b[0].LastSlot || a[0].Fired != b[0].Fired ||
		!b[1].Paused || m.f.Bytes() != g.Bytes() {
		t.Fatalf("schedules %+v, restored %+v", a, b)
	}
	// The restored copy goes on alike: the fired slot stays fired.
	if r := (&machine{t: t, f: g, index: m.index, now: m.now}).fire("a", m.now-1); r.Fired {
		t.Fatalf("restored state fired again: %+v", r)
	}
	// A damaged schedule record is refused.
	bad := bytes.Replace(data, []byte("*/5 * * * * *"), []byte("*/5 * * * * \x00"), 1)
	if err := New().Restore(bytes.NewReader(bad)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged snapshot: %v", err)
	}
}

func TestRestoreSettlesScheduleSlots(t *testing.T) {
	m := newMachine(t)
	m.do(putSched("s"))
	var backup bytes.Buffer
	snap := m.f.Snapshot()
	if _, err := snap.WriteTo(&backup); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	settled := m.now + int64(time.Hour)
	var out bytes.Buffer
	if _, err := PrepareRestore(&out, &backup, RestorePlan{Index: 100, Floor: 1, Latest: settled, Settled: settled}); err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(&out); err != nil {
		t.Fatal(err)
	}
	// The backup's cluster may have fired the slots after the backup: the
	// restored cluster counts them as settled.
	if sc, _ := g.Schedule("s"); sc.LastSlot != settled {
		t.Fatalf("restored LastSlot %d, want %d", sc.LastSlot, settled)
	}
	// Settling the slots through a time makes it the state's: no time in
	// a state is after its own.
	if st := g.Stats(); st.LastTime != settled {
		t.Fatalf("restored state's time %d, want %d", st.LastTime, settled)
	}
}

// withSchedule writes f's state as a snapshot whose schedules are edited
// copies: the checksum is right, the schedule lies.
func withSchedule(t *testing.T, f *FSM, edit func(sc *Schedule)) []byte {
	t.Helper()
	snap := f.Snapshot()
	defer snap.Release()
	for i, sc := range snap.schedules {
		c := *sc
		edit(&c)
		snap.schedules[i] = &c
	}
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A backup's schedule is held to the clock rule like every other record:
// its creation and change no later than the state's time, its slots
// settled from its creation through no later than the state's time (a
// LastSlot in 2262 would silence the schedule for good), its counters
// below MaxIndex. A restore refuses anything else as corrupt.
func TestRestoreChecksScheduleTimes(t *testing.T) {
	m := newMachine(t)
	m.do(putSched("s"))
	m.advance(int64(time.Minute))
	m.fire("s", m.now-int64(time.Second))
	m.advance(int64(time.Minute))
	honest := withSchedule(t, m.f, func(*Schedule) {})
	if err := New().Restore(bytes.NewReader(honest)); err != nil {
		t.Fatalf("honest backup: %v", err)
	}
	for name, edit := range map[string]func(sc *Schedule){
		"created after the state's time": func(sc *Schedule) { sc.CreatedAt = m.now + 1 },
		"created before 1970":            func(sc *Schedule) { sc.CreatedAt = -1 },
		"updated after the state's time": func(sc *Schedule) { sc.UpdatedAt = m.now + 1 },
		"updated before 1970":            func(sc *Schedule) { sc.UpdatedAt = -5 },
		"updated before created":         func(sc *Schedule) { sc.UpdatedAt = sc.CreatedAt - 1 },
		"settled in 2262":                func(sc *Schedule) { sc.LastSlot = math.MaxInt64 },
		"settled after the state's time": func(sc *Schedule) { sc.LastSlot = m.now + 1 },
		"settled before created":         func(sc *Schedule) { sc.LastSlot = sc.CreatedAt - 1 },
		"settled before 1970":            func(sc *Schedule) { sc.LastSlot = -1 },
		"fired near 2^64":                func(sc *Schedule) { sc.Fired = math.MaxUint64 },
		"skipped near 2^64":              func(sc *Schedule) { sc.Skipped = math.MaxUint64 - 1 },
	} {
		data := withSchedule(t, m.f, edit)
		if err := New().Restore(bytes.NewReader(data)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: restore says %v", name, err)
		}
		var out bytes.Buffer
		if _, err := PrepareRestore(&out, bytes.NewReader(data), RestorePlan{Index: 100, Floor: 1, Latest: m.now, Settled: m.now}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: PrepareRestore says %v", name, err)
		}
	}
}

// A caller scoped to one submitter changes only that submitter's
// schedules, checked where puts are ordered: the API's own check comes
// before the proposal, and another submitter may create the schedule in
// between.
func TestScheduleOwnerChecked(t *testing.T) {
	m := newMachine(t)
	mine := putSched("s")
	mine.Template.Submitter = "a"
	m.do(mine)
	theirs := putSched("s")
	theirs.Cron, theirs.Replace, theirs.Owner, theirs.Template.Submitter = "*/5 * * * *", true, "b", "b"
	before := m.f.st.schedules["s"]
	m.fail(theirs, ErrConflict)
	m.fail(&PutSchedule{Name: "s", PauseOnly: true, Paused: true, Owner: "b"}, ErrConflict)
	m.fail(&DeleteSchedule{Name: "s", Owner: "b"}, ErrConflict)
	if got := m.f.st.schedules["s"]; got != before || got.Paused || got.Template.Submitter != "a" {
		t.Fatalf("another submitter's commands changed the schedule: %+v", got)
	}
	// Its owner, and a caller scoped to no one submitter, may.
	m.do(&PutSchedule{Name: "s", PauseOnly: true, Paused: true, Owner: "a"})
	m.do(&PutSchedule{Name: "s", PauseOnly: true, Paused: false})
	// A scoped caller creates a schedule that does not exist yet.
	fresh := putSched("t")
	fresh.Owner, fresh.Template.Submitter = "b", "b"
	if r := m.do(fresh).(PutScheduleResult); !r.Created {
		t.Fatalf("scoped create: %+v", r)
	}
	m.do(&DeleteSchedule{Name: "s", Owner: "a"})
}

// ScheduleDefinitions is Schedules without the templates' payloads.
func TestScheduleDefinitionsLeavePayloadsOut(t *testing.T) {
	m := newMachine(t)
	put := putSched("s")
	put.Template.Payload = []byte("big")
	m.do(put)
	full, defs := m.f.Schedules(), m.f.ScheduleDefinitions()
	if len(defs) != 1 || defs[0].Template.Payload != nil || string(full[0].Template.Payload) != "big" {
		t.Fatalf("definitions %+v, full %+v", defs, full)
	}
	full[0].Template.Payload = nil
	if !reflect.DeepEqual(defs[0], full[0]) {
		t.Fatalf("definitions differ beyond the payload: %+v against %+v", defs[0], full[0])
	}
}
