package fsm

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestCheckFindsIndexDamage: the state's check finds a queued job missing
// from its ready heap or from its queue's ready order, and lets pass what
// those may hold besides (a job listed twice, a stale entry); and it finds
// a job its id no longer leads to.
func TestCheckFindsIndexDamage(t *testing.T) {
	readyJob := func(s *state, seq uint64) *Job {
		if j := s.job(seq); j != nil && j.State == JobQueued && !s.delayedJob(j) {
			return j
		}
		return nil
	}
	// readyInHeap finds a ready heap and the index of a ready job in it.
	readyInHeap := func(t *testing.T, s *state) (*jobHeap, int) {
		for _, kinds := range s.ready {
			for _, h := range kinds {
				for i, it := range h.items {
					if readyJob(s, it.seq) != nil {
						return h, i
					}
				}
			}
		}
		t.Fatal("no ready job in a ready heap")
		return nil, 0
	}
	// endsReady finds a queue whose ready order ends with a ready job's
	// entry: its last entry, which can go or take a later time without
	// breaking the heap's order.
	endsReady := func(t *testing.T, s *state) *queueCounts {
		for _, qc := range s.queues {
			if n := len(qc.since); n > 1 {
				if it := qc.since[n-1]; readyJob(s, it.seq) != nil && readySince(s.job(it.seq)) == it.at {
					return qc
				}
			}
		}
		t.Fatal("no queue whose ready order ends with a ready job")
		return nil
	}
	damage := map[string]struct {
		edit func(t *testing.T, s *state)
		want string // in the error; "" for none
	}{
		"ready heap loses a job": {func(t *testing.T, s *state) {
			h, i := readyInHeap(t, s)
			h.items = append(h.items[:i], h.items[i+1:]...)
		}, "belong to it"},
		"ready heap lists a job twice": {func(t *testing.T, s *state) {
			h, i := readyInHeap(t, s)
			h.items = append(h.items, h.items[i])
		}, ""},
		"ready order loses a job": {func(t *testing.T, s *state) {
			qc := endsReady(t, s)
			qc.since = qc.since[:len(qc.since)-1]
		}, "missing from its ready order"},
		"ready order lists a job at the wrong time": {func(t *testing.T, s *state) {
			qc := endsReady(t, s)
			qc.since[len(qc.since)-1].at++
		}, "missing from its ready order"},
		"id index loses a job": {func(t *testing.T, s *state) {
			i := slices.IndexFunc(s.jobIDs.seqs, func(seq uint64) bool { return seq != 0 })
			s.jobIDs.seqs[i] = 0 // a hole the probe stops at, the count unchanged
		}, "id index says"},
		"id index swaps two jobs": {func(t *testing.T, s *state) {
			x := &s.jobIDs
			i := slices.IndexFunc(x.seqs, func(seq uint64) bool { return seq != 0 })
			k := len(x.seqs) - 1
			for x.seqs[k] == 0 {
				k--
			}
			x.seqs[i], x.seqs[k] = x.seqs[k], x.seqs[i]
		}, "id index says"},
		"ready order holds a stale entry": {func(t *testing.T, s *state) {
			for _, qc := range s.queues {
				if len(qc.since) > 0 {
					qc.since = append(qc.since, readyItem{at: math.MaxInt64, seq: qc.since[0].seq})
					return
				}
			}
			t.Fatal("no queue with a ready order")
		}, ""},
	}
	for name, d := range damage {
		t.Run(name, func(t *testing.T) {
			m := busyMachine(t)
			s := m.f.st
			if err := s.check(); err != nil {
				t.Fatalf("before the damage: %v", err)
			}
			d.edit(t, s)
			err := s.check()
			switch {
			case d.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case d.want != "" && (err == nil || !strings.Contains(err.Error(), d.want)):
				t.Fatalf("check: %v; want an error naming %q", err, d.want)
			}
		})
	}
}
