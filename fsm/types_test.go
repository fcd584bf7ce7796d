package fsm

import (
	"testing"
	"unsafe"
)

// A million jobs and leases are most of a node's memory: each record must
// stay in its size class (DESIGN.md, "A job's leases are a pointer").
func TestRecordSizes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are of 64-bit platforms")
	}
	if got := unsafe.Sizeof(Job{}); got != 192 {
		t.Errorf("Job is %d bytes, want 192", got)
	}
	if got := unsafe.Sizeof(Lease{}); got != 80 {
		t.Errorf("Lease is %d bytes, want 80", got)
	}
}

// Leases and SetLeases behave as a slice field would: the same elements,
// length and room, shared by copies of the job.
func TestSetLeasesActsAsASliceField(t *testing.T) {
	var j Job
	if j.Leases() != nil {
		t.Fatal("a new job has leases")
	}
	backing := make([]Lease, 2, 4)
	backing[0].Token, backing[1].Token = 1, 2
	j.SetLeases(backing)
	ls := j.Leases()
	if len(ls) != 2 || cap(ls) != 4 || &ls[0] != &backing[0] || ls[1].Token != 2 {
		t.Fatalf("leases %v, len %d cap %d: not the slice given", ls, len(ls), cap(ls))
	}
	c := j // a copy shares the leases, as it would share a slice
	c.Leases()[0].Token = 7
	if j.Leases()[0].Token != 7 {
		t.Fatal("a copy of the job does not share its leases")
	}
	// Appending within the room changes the job only once given back.
	grown := append(j.Leases(), Lease{Token: 3})
	if len(j.Leases()) != 2 {
		t.Fatal("appending to the leases changed the job")
	}
	j.SetLeases(grown)
	if ls := j.Leases(); len(ls) != 3 || ls[2].Token != 3 || &ls[0] != &backing[0] {
		t.Fatalf("after SetLeases of the grown slice: %v", ls)
	}
	// A slice capped at its length stays capped: appending copies.
	j.SetLeases(backing[:1:1])
	if ls := append(j.Leases(), Lease{Token: 9}); &ls[0] == &backing[0] || backing[1].Token != 2 {
		t.Fatal("appending to leases capped at their length wrote into the room past them")
	}
	for _, empty := range [][]Lease{nil, {}, make([]Lease, 0, 3)[:0:0]} {
		j.SetLeases(empty)
		if j.Leases() != nil {
			t.Fatalf("SetLeases(%#v): leases %v, want none", empty, j.Leases())
		}
	}
	// Room past 255 is forgotten, never more than there is.
	j.SetLeases(make([]Lease, 3, 300))
	if ls := j.Leases(); len(ls) != 3 || cap(ls) != 255 {
		t.Fatalf("len %d cap %d, want 3 and 255", len(ls), cap(ls))
	}
	defer func() {
		if recover() == nil {
			t.Fatal("256 leases did not panic")
		}
	}()
	j.SetLeases(make([]Lease, 256))
}
