package fsm

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// crafted writes f's state as a snapshot with edits made to copies of its
// header, jobs and events: the checksum is right, the contents lie.
func crafted(t testing.TB, f *FSM, edit func(h *snapHeader, jobs []*Job, events []*Event)) []byte {
	t.Helper()
	snap := f.Snapshot()
	hdr := snap.hdr
	var jobs []*Job
	eachJob(snap.shards, func(j *Job) bool { jobs = append(jobs, j.clone()); return true })
	var events []*Event
	for i := range snap.events.len() {
		ev := *snap.events.at(i)
		events = append(events, &ev)
	}
	edit(&hdr, jobs, events)
	var buf bytes.Buffer
	sw := newSnapWriter(&buf, snapVersionFor(snap.nodes))
	sw.record(tagHeader, func(e *encoder) { encodeHeader(e, &hdr) })
	slices.SortFunc(snap.workers, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	for _, w := range snap.workers {
		sw.record(tagWorker, func(e *encoder) { encodeWorker(e, &w, sw.version) })
	}
	for _, j := range jobs {
		sw.record(tagJob, func(e *encoder) { encodeJob(e, j, sw.version) })
	}
	for _, ev := range events {
		sw.record(tagEvent, func(e *encoder) { encodeEvent(e, ev, sw.version) })
	}
	slices.SortFunc(snap.nodes, func(a, b *Node) int { return strings.Compare(a.ID, b.ID) })
	for _, n := range snap.nodes {
		sw.record(tagNode, func(e *encoder) { encodeNode(e, n, sw.version) })
	}
	if err := sw.finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// leased returns the first job with a lease.
func leased(jobs []*Job) *Job {
	for _, j := range jobs {
		if len(j.Leases()) > 0 {
			return j
		}
	}
	panic("no job with a lease")
}

// year2262 is the last instant an int64 of nanoseconds holds.
const year2262 = math.MaxInt64

// A snapshot whose counters no cluster reaches, or whose records claim a
// time or index after the state's own, is refused by every restore, and a
// refused restore changes nothing.
func TestRestoreRefusesLies(t *testing.T) {
	m := busyMachine(t)
	if unchanged := crafted(t, m.f, func(*snapHeader, []*Job, []*Event) {}); !bytes.Equal(unchanged, snapshotBytes(t, m.f)) {
		t.Fatal("crafted() without edits differs from the snapshot")
	}
	lies := map[string]func(h *snapHeader, jobs []*Job, events []*Event){
		"index 2^64-1":         func(h *snapHeader, _ []*Job, _ []*Event) { h.lastIndex = math.MaxUint64 },
		"index at MaxIndex":    func(h *snapHeader, _ []*Job, _ []*Event) { h.lastIndex = MaxIndex },
		"job seq 2^64-1":       func(h *snapHeader, _ []*Job, _ []*Event) { h.jobSeq = math.MaxUint64 },
		"finish seq 2^64-1":    func(h *snapHeader, _ []*Job, _ []*Event) { h.finishSeq = math.MaxUint64 },
		"time beyond int64":    func(h *snapHeader, _ []*Job, _ []*Event) { h.lastTime = math.MaxUint64 },
		"one job more":         func(h *snapHeader, _ []*Job, _ []*Event) { h.jobs++ },
		"one event fewer":      func(h *snapHeader, _ []*Job, _ []*Event) { h.events-- },
		"too many workers":     func(h *snapHeader, _ []*Job, _ []*Event) { h.workers = MaxWorkers + 1 },
		"job after state time": func(h *snapHeader, jobs []*Job, _ []*Event) { jobs[3].UpdatedAt = int64(h.lastTime) + 1 },
		"job in 2262":          func(_ *snapHeader, jobs []*Job, _ []*Event) { jobs[0].SubmittedAt = year2262 },
		"lease after time": func(h *snapHeader, jobs []*Job, _ []*Event) {
			leased(jobs).Leases()[0].GrantedAt = int64(h.lastTime) + 1
		},
		"job after state index": func(h *snapHeader, jobs []*Job, _ []*Event) { jobs[5].ModifyIndex = h.lastIndex + 1 },
		"created after change":  func(_ *snapHeader, jobs []*Job, _ []*Event) { jobs[5].CreateIndex = jobs[5].ModifyIndex + 1 },
		"event after index": func(h *snapHeader, _ []*Job, events []*Event) {
			events[len(events)-1].Index = h.lastIndex + 1
		},
		"event in 2262": func(_ *snapHeader, _ []*Job, events []*Event) { events[len(events)-1].Time = year2262 },
		"token above counter": func(h *snapHeader, jobs []*Job, _ []*Event) {
			leased(jobs).Leases()[0].Token = h.lastToken + 1
		},
		"one request, two acquires": func(h *snapHeader, jobs []*Job, _ []*Event) {
			// A lease that is not live (the worker index is not involved)
			// made one of another acquire's, MaxAcquireBatch tokens after.
			first := leased(jobs)
			for _, j := range jobs {
				if ls := j.Leases(); j != first && len(ls) == 1 && ls[0].State != LeaseActive {
					h.lastToken += MaxAcquireBatch
					ls[0].WorkerID, ls[0].RequestID = first.Leases()[0].WorkerID, first.Leases()[0].RequestID
					ls[0].Token = h.lastToken
					return
				}
			}
			panic("one job with a lease that is not live")
		},
		"one id, two jobs": func(_ *snapHeader, jobs []*Job, _ []*Event) { jobs[1].ID = jobs[0].ID },
		"one token, two leases": func(_ *snapHeader, jobs []*Job, _ []*Event) {
			first := leased(jobs)
			for _, j := range jobs {
				if j != first && len(j.Leases()) > 0 {
					j.Leases()[0].Token = first.Leases()[0].Token
					return
				}
			}
			panic("one job with a lease")
		},
	}
	target := busyMachine(t)
	target.do(&SubmitJob{Spec: spec("only-in-target")})
	before, events := target.f.Hash(), target.f.Stats().LastEventSeq
	// What the index checks alone find (the rest of the state is sound).
	names := map[string]string{"one id, two jobs": "id index", "one token, two leases": "token index",
		"one request, two acquires": "more than one acquire grants"}
	for name, lie := range lies {
		data := crafted(t, m.f, lie)
		if err := target.f.Restore(bytes.NewReader(data)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), names[name]) {
			t.Errorf("%s: restore: %v", name, err)
		}
		if _, err := InspectSnapshot(bytes.NewReader(data)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: inspect: %v", name, err)
		}
	}
	if target.f.Hash() != before || target.f.Stats().LastEventSeq != events {
		t.Fatal("a refused restore changed the state")
	}
}

// A backup restored into a cluster takes the cluster's index, not its own,
// and must not claim a time after the cluster's clock nor a token counter
// no floor can be raised above: such a backup is refused naming the field.
func TestPrepareRestore(t *testing.T) {
	m := busyMachine(t)
	now := m.now
	honest := snapshotBytes(t, m.f)
	plan := RestorePlan{Index: 10_000, Floor: 1 << 40, Latest: now, Now: now}

	refused := map[string]struct {
		data  []byte
		plan  RestorePlan
		field string
	}{
		"time in 2262":                     {crafted(t, m.f, func(h *snapHeader, _ []*Job, _ []*Event) { h.lastTime = year2262 }), plan, "last_time"},
		"time just past the clock":         {honest, RestorePlan{Index: plan.Index, Floor: plan.Floor, Latest: m.f.Stats().LastTime - 1}, "last_time"},
		"token counter at the floor bound": {crafted(t, m.f, func(h *snapHeader, _ []*Job, _ []*Event) { h.lastToken = MaxTokenFloor }), plan, "last_token"},
		"token counter 2^64-1":             {crafted(t, m.f, func(h *snapHeader, _ []*Job, _ []*Event) { h.lastToken = math.MaxUint64 }), plan, "last_token"},
		"index beyond any cluster's":       {honest, RestorePlan{Index: MaxIndex, Floor: plan.Floor, Latest: now}, "index"},
		"floor beyond the bound":           {honest, RestorePlan{Index: plan.Index, Floor: MaxTokenFloor + 1, Latest: now}, "floor"},
	}
	for name, c := range refused {
		var out bytes.Buffer
		_, err := PrepareRestore(&out, bytes.NewReader(c.data), c.plan)
		var fe *FieldError
		if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want an invalid %s", name, err, c.field)
		}
		if out.Len() != 0 {
			t.Errorf("%s: %d bytes written for a refused restore", name, out.Len())
		}
	}
	var out bytes.Buffer
	if _, err := PrepareRestore(&out, bytes.NewReader(crafted(t, m.f, func(h *snapHeader, _ []*Job, _ []*Event) {
		h.lastIndex = math.MaxUint64
	})), plan); !errors.Is(err, ErrCorrupt) {
		t.Errorf("index 2^64-1: %v", err)
	}

	// An honest backup of a longer log than the cluster's: the copy has the
	// cluster's index, nothing after it, a raised counter and the event.
	fileIndex := m.f.LastIndex()
	low := RestorePlan{Index: fileIndex / 2, Floor: plan.Floor, Latest: now}
	out.Reset()
	st, err := PrepareRestore(&out, bytes.NewReader(honest), low)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastIndex != low.Index || st.LastToken != low.Floor || st.Events != m.f.Stats().Events+1 {
		t.Fatalf("prepared %+v, want index %d token %d", st, low.Index, low.Floor)
	}
	g := New()
	if err := g.Restore(bytes.NewReader(out.Bytes())); err != nil {
		t.Fatal(err)
	}
	jobs, _ := g.Jobs(JobFilter{})
	for _, j := range jobs {
		if j.ModifyIndex > low.Index {
			t.Fatalf("job %s modified at %d, after the restore's index %d", j.ID, j.ModifyIndex, low.Index)
		}
	}
	page := g.Events(0, MaxPageSize)
	if ev := page.Events[len(page.Events)-1]; ev.Type != EventTokenFloorRaised || ev.Index != low.Index {
		t.Fatalf("last event %+v", ev)
	}
	// The indexes keep growing from the cluster's.
	r := &machine{t: t, f: g, index: low.Index + 1, now: now}
	gr := r.acquireOne("w1")
	if gr.Lease.Token != low.Floor+1 || gr.Job.ModifyIndex != low.Index+2 {
		t.Fatalf("first grant after restore: token %d at index %d", gr.Lease.Token, gr.Job.ModifyIndex)
	}

	// A backup of a shorter log: only the state's index moves. A floor
	// below the counter leaves the allowance for what the backup's
	// cluster can have granted in the 3 s since it was taken.
	out.Reset()
	backup := m.f.Stats()
	high := RestorePlan{Index: fileIndex + 1000, Floor: 1, Latest: now, Now: backup.LastTime + 3*int64(time.Second)}
	if st, err = PrepareRestore(&out, bytes.NewReader(honest), high); err != nil {
		t.Fatal(err)
	}
	if st.LastIndex != high.Index || st.LastToken != backup.LastToken+3*MaxGrantsPerSecond {
		t.Fatalf("prepared %+v, want token %d", st, backup.LastToken+3*MaxGrantsPerSecond)
	}
}

// The appended event must not push the log past MaxEvents.
func TestPrepareRestoreAtEventBound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a full event log")
	}
	f := New()
	data, _ := Encode(1, &RecordEvent{Event: EventLeaderChanged})
	for i := range MaxEvents + 10 {
		if _, err := f.Apply(uint64(i+1), data); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	st, err := PrepareRestore(&out, bytes.NewReader(snapshotBytes(t, f)), RestorePlan{Index: MaxEvents + 20, Floor: 10, Latest: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st.Events != MaxEvents || st.LastToken != MaxGrantsPerSecond { // the allowance of one second
		t.Fatalf("events %d last token %d", st.Events, st.LastToken)
	}
	if err := New().Restore(&out); err != nil {
		t.Fatal(err)
	}
}
