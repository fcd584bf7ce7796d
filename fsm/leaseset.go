package fsm

import "slices"

// leaseSet is one worker's live leases, sorted by token: the worker index.
// A worker holds at most its capacity (MaxCapacity at most), so a sorted
// slice of 16-byte entries serves every lookup with a binary search, at a
// third of a small map's bytes per lease.
type leaseSet []leaseEntry

type leaseEntry struct {
	token, seq uint64 // the lease's token and its job's seq
}

func (ls leaseSet) search(tok uint64) (int, bool) {
	return slices.BinarySearchFunc(ls, tok, func(e leaseEntry, tok uint64) int { return cmpU64(e.token, tok) })
}

// seq returns the job seq of the worker's lease tok, if it holds it.
func (ls leaseSet) seq(tok uint64) (uint64, bool) {
	if i, ok := ls.search(tok); ok {
		return ls[i].seq, true
	}
	return 0, false
}

// holdLease adds a live lease to its worker's set. room is how many leases
// the set is about to hold (an acquire knows its grants): a new set is made
// that large, so a worker's ten leases take ten entries, not sixteen.
func (s *state) holdLease(worker string, tok, seq uint64, room int) {
	ls := s.workerLeases[worker]
	if ls == nil {
		ls = make(leaseSet, 0, max(room, 1))
	}
	i, _ := ls.search(tok) // tokens only grow: i is the end but for restores
	s.workerLeases[worker] = slices.Insert(ls, i, leaseEntry{token: tok, seq: seq})
}

// dropLease removes a lease from its worker's set.
func (s *state) dropLease(worker string, tok uint64) {
	ls := s.workerLeases[worker]
	i, ok := ls.search(tok)
	if !ok {
		return
	}
	if len(ls) == 1 {
		delete(s.workerLeases, worker)
		return
	}
	s.workerLeases[worker] = slices.Delete(ls, i, i+1)
}
