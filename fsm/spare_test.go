package fsm

import (
	"strconv"
	"testing"
)

// A queue that its workers keep empty gets its next job's heaps, and its
// table of kinds, from the spares its last job left, not new ones.
func TestEmptiedQueueReusesItsHeaps(t *testing.T) {
	m := newMachine(t)
	m.register("w", 1)
	s := m.f.st
	sp := spec("j0")
	sp.Submitter = "team"
	m.submit(sp)
	kinds, ready, submitted := s.ready["default"], s.ready["default"]["eval"], s.submitted["team"]
	m.report(m.acquireOne("w"), "r0", OutcomeSucceeded, false)
	if s.ready["default"] != nil || s.submitted["team"] != nil {
		t.Fatal("the emptied queue kept its heaps in the indexes")
	}
	if len(s.spare.heaps) != 2 || s.spare.kinds == nil {
		t.Fatalf("%d spare heaps and a spare table of kinds %t, want 2 and true", len(s.spare.heaps), s.spare.kinds != nil)
	}
	sp = spec("j1")
	sp.Submitter = "team"
	m.submit(sp)
	gotKinds := s.ready["default"]
	gotKinds["probe"] = nil // the same map: the change shows through the old name
	_, same := kinds["probe"]
	delete(gotKinds, "probe")
	if !same {
		t.Error("the queue's next job made a new table of kinds")
	}
	if h := s.ready["default"]["eval"]; h != ready && h != submitted {
		t.Error("the queue's next job made a new ready heap")
	}
	if h := s.submitted["team"]; h != ready && h != submitted {
		t.Error("the submitter's next job made a new heap")
	}
	if got := m.acquireOne("w"); got.Job.ID != "j1" {
		t.Fatalf("granted %s, want j1", got.Job.ID)
	}
}

// What the spares keep is bounded: a heap that held many entries gives
// its room back, and a table that held many kinds is not kept.
func TestSparesKeepLittle(t *testing.T) {
	m := newMachine(t)
	const jobs = spareHeapItems + 36
	m.register("w", jobs)
	for i := range jobs {
		sp := spec("j" + strconv.Itoa(i))
		sp.Kind = "k" + strconv.Itoa(i%(spareKindsMost+1))
		m.submit(sp)
	}
	if got := len(m.acquire("w", jobs)); got != jobs {
		t.Fatalf("granted %d, want %d", got, jobs)
	}
	s := m.f.st
	if s.spare.kinds != nil {
		t.Errorf("kept the table of a queue that held %d kinds", spareKindsMost+1)
	}
	if len(s.spare.wide) != 0 {
		t.Errorf("still notes %d queues as wide", len(s.spare.wide))
	}
	if len(s.spare.heaps) != spareHeaps {
		t.Errorf("%d spare heaps, want %d", len(s.spare.heaps), spareHeaps)
	}

	// One kind, more entries than a spare keeps room for.
	m = newMachine(t)
	m.register("w", jobs)
	for i := range jobs {
		m.submit(spec("j" + strconv.Itoa(i)))
	}
	m.acquire("w", jobs)
	s = m.f.st
	if len(s.spare.heaps) != 1 {
		t.Fatalf("%d spare heaps, want 1", len(s.spare.heaps))
	}
	if c := cap(s.spare.heaps[0].items); c != 0 {
		t.Fatalf("the spare heap kept room for %d entries, want none", c)
	}
	if s.spare.kinds == nil {
		t.Error("did not keep the table of a queue of one kind")
	}
}

// A heap or table of kinds emptied by an apply is not handed out again
// before that apply ends: its candidate heaps may still name it.
func TestEmptiedHeapWaitsForItsApplyToEnd(t *testing.T) {
	s := newState()
	h := s.newHeap()
	s.heapEmptied(h)
	if s.newHeap() == h {
		t.Fatal("reused a heap in the apply that emptied it")
	}
	kinds := s.newKinds()
	kinds["probe"] = nil
	delete(kinds, "probe")
	s.kindsEmptied("q", kinds)
	k2 := s.newKinds()
	k2["probe"] = nil
	if _, same := kinds["probe"]; same {
		t.Fatal("reused a table of kinds in the apply that emptied it")
	}
	s.recycle()
	if s.newHeap() != h {
		t.Error("did not reuse the heap once its apply ended")
	}
	k3 := s.newKinds()
	k3["probe2"] = nil
	if _, same := kinds["probe2"]; !same {
		t.Error("did not reuse the table of kinds once its apply ended")
	}
}
