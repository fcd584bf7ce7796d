package cluster

import (
	"testing"

	"github.com/hashicorp/raft"
)

// A follower's log whose tail Raft truncated (a conflict with a new
// leader's entries) must open again after a crash: raft-wal before v0.4.1
// marked the truncated segment sealed without writing its index block, and
// every later start refused the log ("sealed segment has no index block",
// hashicorp/raft-wal#31). make chaos's mixed run met it on all three nodes.
func TestWALOpensAfterTailTruncation(t *testing.T) {
	dir := t.TempDir()
	s := &walStore{path: dir, segment: 1 << 20}
	if err := s.open(); err != nil {
		t.Fatal(err)
	}
	logs := func(from, to, term uint64) []*raft.Log {
		var out []*raft.Log
		for i := from; i <= to; i++ {
			out = append(out, &raft.Log{Index: i, Term: term, Type: raft.LogNoop})
		}
		return out
	}
	if err := s.StoreLogs(logs(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(8, 10); err != nil { // the conflicting tail
		t.Fatal(err)
	}
	if err := s.StoreLogs(logs(8, 12, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	again := &walStore{path: dir, segment: 1 << 20}
	if err := again.open(); err != nil {
		t.Fatalf("reopening: %v", err)
	}
	defer again.Close()
	for i := uint64(1); i <= 12; i++ {
		var l raft.Log
		if err := again.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d after the restart: %v", i, err)
		}
		want := uint64(1)
		if i >= 8 {
			want = 2
		}
		if l.Term != want {
			t.Fatalf("entry %d has term %d, want %d", i, l.Term, want)
		}
	}
}
