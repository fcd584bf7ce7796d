package fsm

import "slices"

// Jobs that may not run yet: a job submitted with a run-at time in the
// future, or queued again after a retryable failure with a backoff delay,
// is queued (its State says so) but not ready. It waits in the delayed heap,
// ordered by its Job.NotBefore, and moves to its ready heap at the first
// apply whose leader time reaches that moment: promoteDue runs before every
// command, so an acquire compares each job with its own command's time and
// the state machine stays clock-free. Between two applies a due job is
// still in the delayed heap; ReadyAt counts it for the leader's parked
// acquires, which propose and so promote it.
//
// Removal is lazy, as in jobHeap: an entry is live while its job is queued
// with the NotBefore the entry was pushed with.

type delayedItem struct {
	at  int64 // the job's NotBefore when pushed
	seq uint64
}

func (a delayedItem) before(b delayedItem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

type delayedHeap struct {
	items []delayedItem
	live  int // queued jobs waiting in it
}

func (h *delayedHeap) push(it delayedItem) {
	h.items = append(h.items, it)
	siftUp(h.items, len(h.items)-1)
	h.live++
}

func (h *delayedHeap) pop() delayedItem {
	top := h.items[0]
	n := len(h.items) - 1
	h.items[0] = h.items[n]
	h.items = h.items[:n]
	siftDown(h.items, 0)
	return top
}

// left records that one of its jobs left the queue before its time. Stale
// entries are dropped when they come due, or all at once when they
// outnumber the live ones (a job waiting a year would otherwise keep every
// cancelled job's entry behind it), as in jobHeap.
func (h *delayedHeap) left(waiting func(delayedItem) (*Job, bool)) {
	h.live--
	if stale := len(h.items) - h.live; stale > 64 && stale > h.live {
		h.items = slices.DeleteFunc(h.items, func(it delayedItem) bool { _, ok := waiting(it); return !ok })
		slices.SortFunc(h.items, func(a, b delayedItem) int {
			if a.before(b) {
				return -1
			}
			if b.before(a) {
				return 1
			}
			return 0
		}) // a sorted slice is a valid heap
	}
}

// waiting says whether the entry's job is still queued at that time: the
// entry is live.
func (s *state) waiting(it delayedItem) (*Job, bool) {
	j := s.job(it.seq)
	return j, j != nil && j.State == JobQueued && j.NotBefore == it.at
}

// delayedJob says whether a queued job waits in the delayed heap rather
// than its ready heap: right after promoteDue, exactly those not yet due.
func (s *state) delayedJob(j *Job) bool { return delayHonoured && j.NotBefore > s.lastTime }

// promoteDue moves every job whose time has come to its ready heap. It
// runs before each command, at the command's leader time.
func (s *state) promoteDue() {
	h := &s.delayed
	for len(h.items) > 0 && h.items[0].at <= s.lastTime {
		it := h.pop()
		if j, ok := s.waiting(it); ok {
			h.live--
			s.queues[j.Queue].scheduled--
			s.enterReady(j)
		}
	}
	if h.live == 0 && len(h.items) > 0 {
		h.items = h.items[:0] // only stale entries left
	}
}

// readyAt counts the queued jobs of these queues and kinds an acquire at
// time now could take: the ready ones, and the delayed ones due by now
// that the acquire's apply would promote first, per queue no more than
// its settings let a grant take (queues.go).
func (s *state) readyAt(queues, kinds []string, now int64) int {
	per := make([]int, len(queues))
	for i, q := range queues {
		per[i] = s.readyIn(q, kinds)
	}
	s.eachDue(now, func(j *Job, _ int64) {
		if len(kinds) == 0 || containsName(kinds, j.Kind) {
			if q := slices.Index(queues, j.Queue); q >= 0 {
				per[q]++
			}
		}
	})
	n := 0
	for i, q := range queues {
		n += s.capReady(q, per[i])
	}
	return n
}

// eachDue calls fn for each job of the delayed heap due by now, with its
// due time. It visits only the entries due by now (a heap's children are
// never earlier than their parent).
func (s *state) eachDue(now int64, fn func(j *Job, at int64)) {
	items := s.delayed.items
	var walk func(i int)
	walk = func(i int) {
		if i >= len(items) || items[i].at > now {
			return
		}
		if j, ok := s.waiting(items[i]); ok {
			fn(j, items[i].at)
		}
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
}

// nextDueAfter walks the entries due by now (as readyAt does) and returns
// the earliest of their children that is not: a heap's earliest entry after
// now is the root or a child of an entry due by now.
func (s *state) nextDueAfter(now int64) (int64, bool) {
	items := s.delayed.items
	var best int64
	found := false
	var walk func(i int)
	walk = func(i int) {
		if i >= len(items) {
			return
		}
		if at := items[i].at; at > now {
			if !found || at < best {
				best, found = at, true
			}
			return
		}
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return best, found
}

func containsName(names []string, v string) bool {
	for _, n := range names {
		if n == v {
			return true
		}
	}
	return false
}
