package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// busyMachine returns a machine with jobs in every state, two workers and
// a few hundred events.
func busyMachine(t testing.TB) *machine {
	m := newMachine(t)
	m.register("w1", 50)
	m.register("w2", 50)
	for i := range 120 {
		s := spec(fmt.Sprintf("job-%03d", i))
		s.Priority = int32(i % 4)
		s.Submitter = []string{"", "exec-a", "exec-b"}[i%3]
		s.Kind = []string{"eval", "run"}[i%2]
		if i%5 == 0 {
			s.OnWorkerLost = LostFail
		}
		m.submit(s)
	}
	gs := m.acquire("w1", 40)
	gs = append(gs, m.acquire("w2", 30)...)
	for i, g := range gs {
		switch i % 6 {
		case 0:
			m.report(g, "r", OutcomeSucceeded, false)
		case 1:
			m.report(g, "r", OutcomeFailed, true)
		case 2:
			m.do(&Expire{Leases: []LeaseRef{{g.Job.ID, g.Lease.Token}}})
		case 3:
			m.do(&Cancel{JobID: g.Job.ID, Kill: i%2 == 0})
		case 4:
			m.do(&Start{WorkerID: g.Lease.WorkerID, JobID: g.Job.ID, Token: g.Lease.Token})
		}
		m.advance(1000)
	}
	m.do(&Cancel{JobID: "job-119"})
	m.do(&SetNode{NodeID: "node-b", RaftAddr: "127.0.0.1:7002", APIAddr: "127.0.0.1:8002"})
	m.do(&SetNode{NodeID: "node-a", RaftAddr: "127.0.0.1:7001", APIAddr: "127.0.0.1:8001"})
	m.do(&Audit{Action: "cluster.transfer", Actor: "ops", Source: "10.0.0.9:4000", Detail: "to node-b"})
	return m
}

func snapshotBytes(t testing.TB, f *FSM) []byte {
	var buf bytes.Buffer
	snap := f.Snapshot()
	defer snap.Release()
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSnapshotRoundTrip(t *testing.T) {
	m := busyMachine(t)
	data := snapshotBytes(t, m.f)
	g := New()
	if err := g.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if g.Hash() != m.f.Hash() {
		t.Fatal("hash differs after restore")
	}
	if !bytes.Equal(snapshotBytes(t, g), data) {
		t.Fatal("restored state encodes differently")
	}
	a, _ := m.f.Jobs(JobFilter{})
	b, _ := g.Jobs(JobFilter{})
	if len(a) != len(b) {
		t.Fatalf("%d jobs, restored %d", len(a), len(b))
	}
	for i := range a {
		if fmt.Sprint(a[i]) != fmt.Sprint(b[i]) {
			t.Fatalf("job %s differs after restore:\n%+v\n%+v", a[i].ID, a[i], b[i])
		}
	}
	st, err := InspectSnapshot(bytes.NewReader(data))
	if err != nil || st.LastIndex != m.index || st.Jobs[JobQueued] != m.f.Stats().Jobs[JobQueued] {
		t.Fatalf("inspect: %+v %v", st, err)
	}
}

// writeOldSnapshot writes snap as version wrote it, and in the newest
// version.
func writeOldSnapshot(t *testing.T, snap *Snapshot, version byte) (old, newest bytes.Buffer) {
	t.Helper()
	sw := newSnapWriter(&old, version)
	sw.record(tagHeader, func(e *encoder) { encodeHeader(e, &snap.hdr) })
	snap.WriteTo(&newest) // sorts the workers and nodes the same way
	for _, w := range snap.workers {
		sw.record(tagWorker, func(e *encoder) { encodeWorker(e, &w, version) })
	}
	eachJob(snap.shards, func(j *Job) bool { sw.record(tagJob, func(e *encoder) { encodeJob(e, j, sw.version) }); return true })
	for i := range snap.events.len() {
		sw.record(tagEvent, func(e *encoder) { encodeEvent(e, snap.events.at(i), version) })
	}
	for _, n := range snap.nodes {
		sw.record(tagNode, func(e *encoder) { encodeNode(e, n, sw.version) })
	}
	if err := sw.finish(); err != nil {
		t.Fatal(err)
	}
	return old, newest
}

// A snapshot written by version 2 (no worker versions) still restores, its
// workers read back without a version, and a backup of it is restored as
// a version 3 copy; the newest version keeps the workers' versions.
func TestSnapshotVersion2StillReads(t *testing.T) {
	m := busyMachine(t)
	m.do(&RegisterWorker{WorkerID: "w3", Capacity: 1, Version: "v1.4.0"})
	v2, full := writeOldSnapshot(t, m.f.Snapshot(), 2)
	g := New()
	if err := g.Restore(bytes.NewReader(v2.Bytes())); err != nil {
		t.Fatalf("version 2 snapshot refused: %v", err)
	}
	w3, err := g.Worker("w3")
	if err != nil || w3.Version != "" || w3.Capacity != 1 {
		t.Fatalf("w3 from a version 2 snapshot: %+v %v", w3, err)
	}
	if got, want := len(g.Workers()), len(m.f.Workers()); got != want {
		t.Fatalf("%d workers, want %d", got, want)
	}
	var prepared bytes.Buffer
	if _, err := PrepareRestore(&prepared, bytes.NewReader(v2.Bytes()), RestorePlan{Index: g.LastIndex(), Floor: 1 << 40, Latest: m.now}); err != nil {
		t.Fatal(err)
	}
	if prepared.Bytes()[len(snapMagic)] != 3 {
		t.Fatal("a prepared restore without node levels is not written in version 3")
	}
	if err := New().Restore(&prepared); err != nil {
		t.Fatalf("prepared version 2 snapshot refused: %v", err)
	}
	h := New()
	if err := h.Restore(bytes.NewReader(full.Bytes())); err != nil {
		t.Fatal(err)
	}
	if w3, err := h.Worker("w3"); err != nil || w3.Version != "v1.4.0" {
		t.Fatalf("w3 after a round trip in the newest version: %+v %v", w3, err)
	}
	if h.Hash() != m.f.Hash() {
		t.Fatal("a round trip in the newest version changed the state's hash")
	}
}

// A snapshot written by version 1 (no audit fields) still restores, and its
// events read back with empty audit fields.
func TestSnapshotVersion1StillReads(t *testing.T) {
	m := busyMachine(t)
	v1, full := writeOldSnapshot(t, m.f.Snapshot(), 1)
	g := New()
	if err := g.Restore(bytes.NewReader(v1.Bytes())); err != nil {
		t.Fatalf("version 1 snapshot refused: %v", err)
	}
	page := g.Events(0, MaxPageSize)
	audits := 0
	for _, ev := range page.Events {
		if ev.Type == EventAudit {
			audits++
			if ev.Actor != "" || ev.Source != "" {
				t.Fatalf("version 1 event read with audit fields: %+v", ev)
			}
		}
	}
	if audits != 1 {
		t.Fatalf("%d audit events, want 1", audits)
	}
	// A version 1 backup can be restored into a cluster: the copy is
	// written in the newest version, with the same events.
	var prepared bytes.Buffer
	if _, err := PrepareRestore(&prepared, bytes.NewReader(v1.Bytes()), RestorePlan{Index: g.LastIndex(), Floor: 1 << 40, Latest: m.now}); err != nil {
		t.Fatal(err)
	}
	if prepared.Bytes()[len(snapMagic)] != snapVersionFor(nil) {
		t.Fatal("a prepared restore is not written in the version of its state")
	}
	r := New()
	if err := r.Restore(&prepared); err != nil {
		t.Fatalf("prepared version 1 snapshot refused: %v", err)
	}
	if got, want := r.Stats().Events, g.Stats().Events+1; got != want {
		t.Fatalf("prepared copy has %d events, want %d", got, want)
	}
	// The newest version keeps the audit fields; an unknown version is refused.
	h := New()
	if err := h.Restore(bytes.NewReader(full.Bytes())); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, ev := range h.Events(0, MaxPageSize).Events {
		if ev.Type == EventAudit && ev.Actor == "ops" && ev.Source == "10.0.0.9:4000" && ev.Detail == "cluster.transfer: to node-b" {
			found = true
		}
	}
	if !found {
		t.Fatal("audit event lost its fields in a round trip")
	}
	future := append([]byte(nil), full.Bytes()...)
	future[len(snapMagic)] = snapVersion + 1
	if err := New().Restore(bytes.NewReader(future)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("future version: %v", err)
	}
}

// Every damaged snapshot is refused, and a refused restore leaves the
// current state as it was.
func TestRestoreRefusesDamage(t *testing.T) {
	m := busyMachine(t)
	data := snapshotBytes(t, m.f)
	target := busyMachine(t)
	target.do(&SubmitJob{Spec: spec("only-in-target")})
	before := target.f.Hash()

	step := max(1, len(data)/300)
	for i := 0; i < len(data); i += step {
		bad := bytes.Clone(data)
		bad[i] ^= 0x5a
		if err := target.f.Restore(bytes.NewReader(bad)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipped byte %d of %d: %v", i, len(data), err)
		}
	}
	for _, n := range []int{0, 5, len(data) / 2, len(data) - 1} {
		if err := target.f.Restore(bytes.NewReader(data[:n])); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if err := target.f.Restore(io.MultiReader(bytes.NewReader(data), bytes.NewReader([]byte{1}))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing bytes: %v", err)
	}
	if target.f.Hash() != before {
		t.Fatal("a refused restore changed the state")
	}
}

// A snapshot written while applies change every job still holds the state
// of the moment it was taken.
func TestSnapshotIsolatedFromApplies(t *testing.T) {
	m := busyMachine(t)
	want := snapshotBytes(t, m.f)
	snap := m.f.Snapshot()

	jobs, _ := m.f.Jobs(JobFilter{State: JobQueued})
	cmds := []Command{&RegisterWorker{WorkerID: "w3", Capacity: 1000}}
	for _, j := range jobs {
		cmds = append(cmds, &Cancel{JobID: j.ID})
	}
	for i := range 3000 { // enough new jobs to fill new shards
		cmds = append(cmds, &SubmitJob{Spec: spec(fmt.Sprintf("new-%d", i))})
	}
	cmds = append(cmds, &Compact{JobsBefore: m.now + 1, EventsBefore: m.now + 1, Limit: MaxCompactBatch})
	entries := make([][]byte, len(cmds))
	for i, c := range cmds {
		entries[i] = mustEncode(t, c)
	}
	var applyErr error
	apply := func(from, to int) {
		for i, e := range entries[from:to] {
			m.index++
			if _, err := m.f.Apply(m.index, e); err != nil && applyErr == nil {
				applyErr = fmt.Errorf("%T: %w", cmds[from+i], err)
			}
		}
	}
	// Half the changes land before the write starts (so copy-on-write must
	// have kept the frozen versions), half while it runs (for the race
	// detector).
	half := len(jobs)/2 + 1
	apply(0, half)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // no per-step check here: t.Fatal belongs to the test goroutine
		defer wg.Done()
		apply(half, len(entries))
	}()
	var got bytes.Buffer
	if _, err := snap.WriteTo(&got); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if applyErr != nil {
		t.Fatal(applyErr)
	}
	if err := m.f.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("snapshot changed under concurrent applies")
	}
}

// A restore's allowance is the backup's counter plus MaxGrantsPerSecond
// for every second begun since the backup, saturating; a backup taken a
// century ago with a counter of a billion still restores to a counter a
// JSON number holds exactly (2^53).
func TestGrantAllowance(t *testing.T) {
	sec := int64(time.Second)
	cases := []struct {
		token   uint64
		at, now int64
		want    uint64
	}{
		{0, 10 * sec, 10 * sec, MaxGrantsPerSecond},                              // no time: one second
		{5, 10 * sec, 9 * sec, 5 + MaxGrantsPerSecond},                           // a backup from the future: one second
		{5, 10 * sec, 10*sec + 1, 5 + MaxGrantsPerSecond},                        // a nanosecond begins a second
		{5, 10 * sec, 12*sec + 1, 5 + 3*MaxGrantsPerSecond},                      // 2 s and a nanosecond
		{5, math.MinInt64, math.MaxInt64, 5 + 18_446_744_074*MaxGrantsPerSecond}, // the widest span: no overflow
		{MaxTokenFloor - 1, 0, sec, MaxTokenFloor},                               // saturates near the bound
		{MaxTokenFloor, 0, sec, MaxTokenFloor},                                   // at it
	}
	for _, c := range cases {
		if got := GrantAllowance(c.token, c.at, c.now); got != c.want {
			t.Errorf("GrantAllowance(%d, %d, %d) = %d, want %d", c.token, c.at, c.now, got, c.want)
		}
	}
	century := 100 * 365 * 24 * time.Hour
	if got := GrantAllowance(1e9, 0, int64(century)); got >= 1<<53 {
		t.Fatalf("a century-old backup restores to %d, past 2^53", got)
	}
}

func TestChangedClosesOnEvents(t *testing.T) {
	m := newMachine(t)
	ch := m.f.Changed()
	m.register("w1", 1)
	select {
	case <-ch:
	default:
		t.Fatal("register did not signal")
	}
	ch = m.f.Changed()
	m.acquire("w1", 1) // nothing queued: no event, no signal
	select {
	case <-ch:
		t.Fatal("an acquire that granted nothing signalled")
	default:
	}
}

func TestEventsPaging(t *testing.T) {
	m := newMachine(t)
	for i := range 5 {
		m.do(&RecordEvent{Event: EventLeaderChanged, Detail: fmt.Sprint(i)})
	}
	p := m.f.Events(2, 2)
	if len(p.Events) != 2 || p.Events[0].Seq != 3 || p.LastSeq != 5 || p.Truncated {
		t.Fatalf("page %+v", p)
	}
	if p := m.f.Events(5, 10); len(p.Events) != 0 || p.Truncated {
		t.Fatalf("caught-up page %+v", p)
	}
}

func TestJobsPaging(t *testing.T) {
	m := newMachine(t)
	for i := range 2500 { // spans three shards
		m.f.Apply(uint64(i+1), mustEncode(t, &SubmitJob{Spec: spec(fmt.Sprintf("j%04d", i))}))
	}
	var all []Job
	cursor := uint64(0)
	for {
		page, next := m.f.Jobs(JobFilter{AfterSeq: cursor, Limit: 700})
		all = append(all, page...)
		if next == 0 {
			break
		}
		cursor = next
	}
	if len(all) != 2500 {
		t.Fatalf("paged %d jobs", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq {
			t.Fatal("pages out of order")
		}
	}

	// A selective filter: the scan bound ends pages early, possibly empty,
	// and following the cursor still finds every match exactly once.
	want := []string{"j0003", "j1500", "j2499"}
	for i, id := range want {
		m.f.Apply(uint64(2501+i), mustEncode(t, &Cancel{JobID: id}))
	}
	defer func(old int) { maxScan = old }(maxScan)
	maxScan = 100
	var found []string
	pages := 0
	for cursor = 0; ; {
		pages++
		page, next := m.f.Jobs(JobFilter{State: JobCancelled, AfterSeq: cursor, Limit: 2})
		for _, j := range page {
			found = append(found, j.ID)
		}
		if next == 0 {
			break
		}
		if next <= cursor {
			t.Fatalf("cursor went from %d to %d", cursor, next)
		}
		cursor = next
	}
	if fmt.Sprint(found) != fmt.Sprint(want) || pages < 2500/100 {
		t.Fatalf("found %v in %d pages", found, pages)
	}
}

func mustEncode(t testing.TB, c Command) []byte {
	data, err := Encode(1, c)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A client-chosen cursor, however large, is just "nothing newer".
func TestEventsHugeCursor(t *testing.T) {
	m := newMachine(t)
	m.do(&RecordEvent{Event: EventLeaderChanged})
	for _, after := range []uint64{1, 1 << 63, 1<<64 - 1} {
		if p := m.f.Events(after, 10); len(p.Events) != 0 || p.Truncated || p.LastSeq != 1 {
			t.Fatalf("after %d: %+v", after, p)
		}
	}
}

// Results are copies: a caller scribbling on them changes nothing.
func TestResultsDoNotAliasState(t *testing.T) {
	m := newMachine(t)
	m.register("w1", 1)
	before := m.f.Hash()
	res := m.do(&SubmitJob{Spec: spec("a")}).(SubmitResult)
	after := m.f.Hash()
	res.Job.Payload[0] = 'X'
	res.Job.SetLeases(append(res.Job.Leases(), Lease{Token: 99}))
	g := m.acquireOne("w1")
	g.Job.Payload[0] = 'Y'
	got, _ := m.f.Job("a")
	got.Payload[0] = 'Z'
	if j := m.job("a"); string(j.Payload) != "p-a" {
		t.Fatalf("stored payload became %q", j.Payload)
	}
	if before == after {
		t.Fatal("submit did not change the hash")
	}
}

// The grants of one acquire hold copies of their jobs' leases taken from
// one shared block (Job.exportIn): each copy holds its own job's leases,
// and neither writing into one nor appending to it changes the state or
// another grant.
func TestAcquireGrantsShareNoLeases(t *testing.T) {
	m := newMachine(t)
	m.register("w0", 1)
	m.register("w1", 4)
	for _, id := range []string{"a", "b", "c"} {
		m.submit(spec(id))
	}
	// a has a lease behind it, so its copy (two leases) and b's and c's
	// (one each) do not fit the block sized for three grants in turn.
	g := m.acquireOne("w0")
	m.do(&Release{WorkerID: "w0", JobID: g.Job.ID, Token: g.Lease.Token})
	before := m.f.Hash()
	grants := m.acquire("w1", 4)
	if len(grants) != 3 {
		t.Fatalf("granted %d leases, want 3", len(grants))
	}
	want := map[string]int{"a": 2, "b": 1, "c": 1}
	for _, gr := range grants {
		ls := gr.Job.Leases()
		if len(ls) != want[gr.Job.ID] || ls[len(ls)-1].Token != gr.Lease.Token || !ls[len(ls)-1].Equal(gr.Lease) {
			t.Fatalf("grant of %s: leases %v, lease %v", gr.Job.ID, ls, gr.Lease)
		}
		if cap(ls) != len(ls) {
			t.Fatalf("grant of %s: leases of capacity %d, length %d", gr.Job.ID, cap(ls), len(ls))
		}
	}
	hash := m.f.Hash()
	if hash == before {
		t.Fatal("the acquire did not change the hash")
	}
	tokens := make([]uint64, len(grants))
	for i, gr := range grants {
		tokens[i] = gr.Lease.Token
	}
	for i := range grants {
		ls := grants[i].Job.Leases()
		ls[len(ls)-1].Token = 999
		grants[i].Job.SetLeases(append(ls, Lease{Token: 1000 + uint64(i)}))
		for k, other := range grants {
			if k == i {
				continue
			}
			if ol := other.Job.Leases(); k > i && ol[len(ol)-1].Token != tokens[k] {
				t.Fatalf("writing into grant %d changed grant %d: %v", i, k, ol)
			}
		}
	}
	if m.f.Hash() != hash {
		t.Fatal("writing into the grants changed the state")
	}
	for _, id := range []string{"a", "b", "c"} {
		if j := m.job(id); j.Leases()[len(j.Leases())-1].Token == 999 {
			t.Fatalf("job %s's stored lease was written through a grant", id)
		}
	}
}

func TestNodes(t *testing.T) {
	m := newMachine(t)
	n := m.do(&SetNode{NodeID: "a", RaftAddr: "h:1", APIAddr: "h:2"}).(Node)
	if n.APIAddr != "h:2" {
		t.Fatalf("set %+v", n)
	}
	events := m.f.Stats().LastEventSeq
	m.do(&SetNode{NodeID: "a", RaftAddr: "h:1", APIAddr: "h:2"}) // unchanged: no event
	if m.f.Stats().LastEventSeq != events {
		t.Fatal("an unchanged node recorded an event")
	}
	m.do(&SetNode{NodeID: "b", RaftAddr: "h:3", APIAddr: "h:4"})
	m.roundTrip()
	if ns := m.f.Nodes(); len(ns) != 2 || ns[0].ID != "a" || ns[1].APIAddr != "h:4" {
		t.Fatalf("nodes after restore %+v", ns)
	}
	m.do(&RemoveNode{NodeID: "a"})
	if _, ok := m.f.Node("a"); ok {
		t.Fatal("removed node still known")
	}
}

// A node's level is kept by an address-only SetNode and survives a
// snapshot. Snapshots are written in version 3 until a level is recorded
// (a node of the build before levels reads them), and in version 4 after.
func TestNodeLevels(t *testing.T) {
	m := newMachine(t)
	m.do(&SetNode{NodeID: "a", RaftAddr: "h:1", APIAddr: "h:2"})
	version := func() byte {
		var buf bytes.Buffer
		if _, err := m.f.Snapshot().WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()[len(snapMagic)]
	}
	if v := version(); v != 3 {
		t.Fatalf("snapshot version %d before any level, want 3", v)
	}
	m.do(&SetNode{NodeID: "a", RaftAddr: "h:1", APIAddr: "h:2", Level: 4, Version: "v9"})
	m.do(&SetNode{NodeID: "a", RaftAddr: "h:5", APIAddr: "h:2"}) // moved: the level stays
	if v := version(); v != 4 {
		t.Fatalf("snapshot version %d with a level, want 4", v)
	}
	m.roundTrip()
	if n, _ := m.f.Node("a"); n.Level != 4 || n.Version != "v9" || n.RaftAddr != "h:5" {
		t.Fatalf("node after a move and a restore: %+v", n)
	}
}

// TestSnapshotReleaseEndsCopies: a job is copied before its first change
// while an unreleased snapshot froze it, and changed in place once every
// such snapshot is released; the snapshot still writes what it froze.
func TestSnapshotReleaseEndsCopies(t *testing.T) {
	m := busyMachine(t)
	queued, _ := m.f.Jobs(JobFilter{State: JobQueued})
	if len(queued) < 4 {
		t.Fatalf("%d queued jobs, want 4", len(queued))
	}
	ptr := func(id string) *Job { return m.f.st.jobByID(id) }
	cancel := func(id string) { m.do(&Cancel{JobID: id}) }

	// Nothing frozen: in place.
	before := ptr(queued[0].ID)
	cancel(queued[0].ID)
	if ptr(queued[0].ID) != before {
		t.Fatal("a job no snapshot reads was copied to change it")
	}

	want := snapshotBytes(t, m.f) // taken and released
	older := m.f.Snapshot()
	newer := m.f.Snapshot()
	before = ptr(queued[1].ID)
	cancel(queued[1].ID)
	if ptr(queued[1].ID) == before {
		t.Fatal("a job two live snapshots froze was changed in place")
	}
	// A second change in the same generation changes the copy the first
	// made, in place (a copy each time would lose what a caller holding the
	// first copy writes to it); a snapshot taken after it makes the next
	// change copy again.
	seq1 := ptr(queued[1].ID).Seq
	first := m.f.st.editJob(seq1)
	if again := m.f.st.editJob(seq1); again != first {
		t.Fatal("a job changed twice in one generation was copied twice")
	}
	newest := m.f.Snapshot()
	if third := m.f.st.editJob(seq1); third == first {
		t.Fatal("a job the newest snapshot froze was changed in place")
	}
	m.f.st.settle() // the edits above were made outside an apply
	newest.Release()
	newer.Release()
	newer.Release() // twice is harmless
	before = ptr(queued[2].ID)
	cancel(queued[2].ID)
	if ptr(queued[2].ID) == before {
		t.Fatal("a job the older live snapshot froze was changed in place")
	}
	var got bytes.Buffer
	if _, err := older.WriteTo(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("the older snapshot does not write the state it froze")
	}
	older.Release()
	before = ptr(queued[3].ID)
	cancel(queued[3].ID)
	if ptr(queued[3].ID) != before {
		t.Fatal("a job was copied after every snapshot was released")
	}
	if len(m.f.st.frozen) != 0 {
		t.Fatalf("frozen generations %v after every release", m.f.st.frozen)
	}
}

// snapVersionOf writes a snapshot of the machine and returns its version.
func (m *machine) snapVersionOf() byte {
	m.t.Helper()
	v, err := SnapshotVersion(bytes.NewReader(snapshotBytes(m.t, m.f)))
	if err != nil {
		m.t.Fatal(err)
	}
	return v
}

// A snapshot is written in the version of every event it keeps, not only
// of the records: a queue paused and resumed, a schedule created and
// deleted leave nothing but their events (35, 36, 40, 41), which a reader
// of version 5 refuses ("event 2: type 35"). Once compaction drops them the
// version follows the node table again, and a restore counts them anew.
func TestSnapshotVersionCoversKeptEvents(t *testing.T) {
	m := newMachine(t)
	m.setLevel("a", 5)
	if v := m.snapVersionOf(); v != 5 {
		t.Fatalf("level 5, nothing of level 6: version %d", v)
	}
	m.do(&SetQueue{Queue: "q", SetPaused: true, Paused: true})
	m.do(&SetQueue{Queue: "q", SetPaused: true, Paused: false})
	m.do(putSched("s"))
	m.do(&DeleteSchedule{Name: "s"})
	if v := m.snapVersionOf(); v != 6 {
		t.Fatalf("events of level 6 kept, written in version %d", v)
	}
	m.roundTrip()
	if v := m.snapVersionOf(); v != 6 {
		t.Fatalf("restored: version %d", v)
	}
	m.advance(1)
	m.do(&Compact{EventsBefore: m.now, Limit: 1})
	if v := m.snapVersionOf(); v != 5 {
		t.Fatalf("the events of level 6 compacted: version %d, want the nodes' 5", v)
	}

	// Likewise the events of jobs that wait (29, 30) need version 5.
	m = newMachine(t)
	m.setLevel("a", 4)
	m.register("w", 1)
	m.submit(spec("now"))
	m.do(&SubmitJob{Spec: spec("later"), RunAt: m.now + 1})
	m.advance(2)
	for range 2 {
		m.report(m.acquireOne("w"), "r", OutcomeSucceeded, false)
	}
	m.do(&Compact{JobsBefore: m.now + 1, Limit: 10})
	if _, ok := m.lastEvent(EventJobScheduled); !ok {
		t.Fatal("no job.scheduled event")
	}
	if v := m.snapVersionOf(); v != 5 {
		t.Fatalf("job.scheduled kept at level 4: version %d, want 5", v)
	}
}

// A restored state shares its repeated strings as the state that wrote it
// does: the leases of one acquire share their request id and worker id,
// and the jobs of one queue its name. Strings of different bytes stay
// apart, and the state is the one written.
func TestRestoreSharesRepeatedStrings(t *testing.T) {
	d := newBenchDriver()
	for i := range 12 {
		q := "qa"
		if i >= 6 {
			q = "qb"
		}
		d.must(t, &SubmitJob{Spec: JobSpec{ID: fmt.Sprintf("j%02d", i), Queue: q, Kind: "k", Submitter: "s", OnWorkerLost: LostRequeue,
			MaxAttempts: 3, MaxWorkerLosses: 5}})
	}
	for _, a := range []struct {
		worker, request, queue string
		max                    uint32
	}{{"w1", "r1", "qa", 3}, {"w2", "r2", "qa", 3}, {"w1", "r3", "qb", 6}} {
		d.must(t, &RegisterWorker{WorkerID: a.worker, Capacity: 16})
		d.must(t, &Acquire{WorkerID: a.worker, RequestID: a.request, Queues: []string{a.queue}, Max: a.max})
	}
	g := New()
	if err := g.Restore(bytes.NewReader(snapshotBytes(t, d.f))); err != nil {
		t.Fatal(err)
	}
	if g.Hash() != d.f.Hash() {
		t.Fatal("hash differs after restore")
	}
	jobs := make([]Job, 12)
	for i := range jobs {
		var err error
		if jobs[i], err = g.Job(fmt.Sprintf("j%02d", i)); err != nil || len(jobs[i].Leases()) != 1 {
			t.Fatalf("job %d: %+v %v", i, jobs[i], err)
		}
	}
	same := func(what string, a, b string) {
		t.Helper()
		if a != b || unsafe.StringData(a) != unsafe.StringData(b) {
			t.Errorf("%s %q and %q are not one string", what, a, b)
		}
	}
	for _, group := range [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8, 9, 10, 11}} {
		for _, i := range group[1:] {
			same("request ids", jobs[group[0]].Leases()[0].RequestID, jobs[i].Leases()[0].RequestID)
			same("worker ids", jobs[group[0]].Leases()[0].WorkerID, jobs[i].Leases()[0].WorkerID)
		}
	}
	same("worker ids", jobs[0].Leases()[0].WorkerID, jobs[6].Leases()[0].WorkerID)
	same("queues", jobs[0].Queue, jobs[5].Queue)
	same("queues", jobs[6].Queue, jobs[11].Queue)
	for _, p := range [][2]int{{0, 3}, {3, 6}} {
		if jobs[p[0]].Leases()[0].RequestID == jobs[p[1]].Leases()[0].RequestID {
			t.Errorf("jobs %d and %d: one request id %q", p[0], p[1], jobs[p[0]].Leases()[0].RequestID)
		}
	}
}
