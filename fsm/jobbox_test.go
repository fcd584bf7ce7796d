package fsm

import (
	"strings"
	"testing"
	"unsafe"
)

// inside says whether s's bytes lie within the n bytes at p.
func inside(s string, p unsafe.Pointer, n uintptr) bool {
	if s == "" {
		return true
	}
	d, b := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(p)
	return d >= b && d+uintptr(len(s)) <= b+n
}

// A job's id of up to 48 bytes lives in the job's own allocation, right
// after the record; a longer one is a string of its own.
func TestNewJobKeepsItsIDInItsBox(t *testing.T) {
	for _, tc := range []struct {
		n   int
		box uintptr // the allocation's size, 0 when the id is not boxed
	}{
		{0, unsafe.Sizeof(jobBox16{})}, {1, unsafe.Sizeof(jobBox16{})}, {16, unsafe.Sizeof(jobBox16{})},
		{17, unsafe.Sizeof(jobBox32{})}, {32, unsafe.Sizeof(jobBox32{})},
		{33, unsafe.Sizeof(jobBox48{})}, {48, unsafe.Sizeof(jobBox48{})},
		{49, 0}, {MaxIDLen, 0},
	} {
		id := strings.Repeat("i", tc.n)
		j := newJob(id)
		if j.ID != id {
			t.Fatalf("%d bytes: id %q, want %q", tc.n, j.ID, id)
		}
		boxed := tc.n > 0 && inside(j.ID, unsafe.Pointer(j), tc.box)
		if want := tc.box != 0 && tc.n > 0; boxed != want {
			t.Errorf("%d bytes: id in the job's allocation %t, want %t", tc.n, boxed, want)
		}
		if shares := tc.n > 0 && unsafe.StringData(j.ID) == unsafe.StringData(id); shares != (tc.n > 0 && tc.box == 0) {
			t.Errorf("%d bytes: the job shares the caller's id %t, want %t", tc.n, shares, !shares)
		}
	}
	// The boxes fill the size classes they are meant for.
	for _, c := range []struct{ got, want uintptr }{
		{unsafe.Sizeof(Job{}), 208},
		{unsafe.Sizeof(jobBox16{}), 224}, {unsafe.Sizeof(jobBox32{}), 240}, {unsafe.Sizeof(jobBox48{}), 256},
	} {
		if c.got != c.want {
			t.Errorf("a record of %d bytes, want %d: the boxes no longer match Go's size classes", c.got, c.want)
		}
	}
}

// A copy-on-write copy of a job has its own copy of the id: a version's id
// must not keep another version's record alive.
func TestCloneBoxesItsOwnID(t *testing.T) {
	j := newJob("job-0123456789")
	j.Leases = []Lease{{Token: 1, WorkerID: "w"}}
	c := j.clone()
	if c.ID != j.ID || c.Leases[0].Token != 1 {
		t.Fatalf("clone %q with leases %v, want %q's", c.ID, c.Leases, j.ID)
	}
	if !inside(c.ID, unsafe.Pointer(c), unsafe.Sizeof(jobBox16{})) {
		t.Error("the clone's id lies outside the clone's allocation")
	}
	c.Leases[0].Token = 2
	if j.Leases[0].Token != 1 {
		t.Error("changing the clone's lease changed the original's")
	}
}

// A submitted job's id lives in its box.
func TestSubmittedJobIsBoxed(t *testing.T) {
	m := newMachine(t)
	m.submit(spec("a-job-id-of-twenty-five-b"))
	s := m.f.st
	j := s.jobByID("a-job-id-of-twenty-five-b")
	if !inside(j.ID, unsafe.Pointer(j), unsafe.Sizeof(jobBox32{})) {
		t.Error("the submitted job's id is a string of its own")
	}
}
