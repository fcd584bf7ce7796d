package fsm

import "slices"

// deadIndex lists dead jobs in finish order: what PurgeJobs takes, oldest
// death first. The state keeps two, one of every dead job and one per
// queue (so a purge of one queue walks only that queue's dead jobs). A job
// leaves by a retry or a purge, anywhere in the order: its entry becomes a
// tombstone (seq 0) found by a binary search on its finish seq, so a
// removal costs O(log n), not a rewrite of the index. Tombstones are
// dropped when a walk passes them, when they reach the front, and all at
// once when they outnumber the live entries, as the ready heaps drop stale
// entries. Nothing a command answers depends on them: a walk skips them
// and counts only live entries, so a replica restored from a snapshot
// (no tombstones) answers like one that applied every entry.
type deadIndex struct {
	items []deadEntry // finish seqs strictly increasing
	live  int         // entries that are not tombstones
}

type deadEntry struct {
	fseq uint64 // the job's FinishSeq
	seq  uint64 // the job's seq; 0: a tombstone
}

// push appends a job that just died: its finish seq is the largest yet.
func (d *deadIndex) push(j *Job) {
	d.items = append(d.items, deadEntry{fseq: j.FinishSeq(), seq: j.Seq})
	d.live++
}

// remove makes the entry of the job with this finish seq a tombstone.
func (d *deadIndex) remove(fseq uint64) {
	i, ok := slices.BinarySearchFunc(d.items, fseq, func(e deadEntry, f uint64) int { return cmpU64(e.fseq, f) })
	if !ok || d.items[i].seq == 0 {
		return
	}
	d.items[i].seq = 0
	d.live--
	d.tidy()
}

// tidy drops the tombstones at the front, and every one once they
// outnumber the live entries.
func (d *deadIndex) tidy() {
	k := 0
	for k < len(d.items) && d.items[k].seq == 0 {
		k++
	}
	d.items = d.items[k:]
	if stale := len(d.items) - d.live; stale > 64 && stale > d.live {
		d.items = slices.DeleteFunc(slices.Clone(d.items), func(e deadEntry) bool { return e.seq == 0 })
	}
	if len(d.items) == 0 {
		d.items = nil
	}
}

// deadOf returns the queue's dead index, creating it.
func (s *state) deadOf(queue string) *deadIndex {
	d := s.deadBy[queue]
	if d == nil {
		d = &deadIndex{}
		s.deadBy[queue] = d
	}
	return d
}

// enterDead lists a job that just died (its FinishSeq set).
func (s *state) enterDead(j *Job) {
	s.dead.push(j)
	s.deadOf(j.Queue).push(j)
}

// leaveDead takes a dead job out of both indexes (it is retried or
// purged; its FinishSeq still set): a binary search in each.
func (s *state) leaveDead(j *Job) {
	s.dead.remove(j.FinishSeq())
	if d := s.deadBy[j.Queue]; d != nil {
		d.remove(j.FinishSeq())
		if d.live == 0 {
			delete(s.deadBy, j.Queue)
		}
	}
}

// OldestDead is when the longest-dead job died, by the state's time (false
// if no job is dead): what the leader's retention purge waits for.
func (f *FSM) OldestDead() (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.st
	for _, e := range s.dead.items { // tidy keeps the front live; a walk costs nothing more
		if e.seq != 0 {
			return s.job(e.seq).FinishedAt(), true
		}
	}
	return 0, false
}
