package fsm

import "slices"

// jobHeap orders queued jobs: highest priority first, then oldest (lowest
// seq). One heap per (queue, kind) is what acquire picks from; one per
// submitter (all priorities zero, so oldest first) is what cancel by
// submitter takes from. The order is total, so which job comes out depends
// only on the set of queued jobs, never on the history of the heap: a
// replica restored from a snapshot picks exactly like one that applied the
// whole log.
//
// Removal is lazy. Entering the queued state pushes an entry and leaving it
// only decrements live; peek discards entries whose job is no longer queued.
// A job that leaves and re-enters the queue before its old entry is
// discarded has two entries with the same key, which is harmless (they
// name the same job) and cleared by the next rebuild. Rebuilds happen when
// stale entries outnumber live ones, so the cost is amortized.
type jobHeap struct {
	items []heapItem
	live  int // queued jobs that belong to this heap
}

type heapItem struct {
	prio int32
	seq  uint64
}

func (a heapItem) before(b heapItem) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	return a.seq < b.seq
}

func (a heapItem) compare(b heapItem) int {
	switch {
	case a.before(b):
		return -1
	case b.before(a):
		return 1
	}
	return 0
}

// entered records a job that entered the queued state.
func (h *jobHeap) entered(it heapItem) {
	h.items = append(h.items, it)
	h.up(len(h.items) - 1)
	h.live++
}

// left records that one of its queued jobs left the queued state; the job's
// state must already say so.
func (h *jobHeap) left(isQueued func(seq uint64) bool) {
	h.live--
	if stale := len(h.items) - h.live; stale > 64 && stale > h.live {
		h.rebuild(isQueued)
	}
}

// rebuild keeps one entry per queued job. A sorted slice is a valid heap.
func (h *jobHeap) rebuild(isQueued func(seq uint64) bool) {
	kept := slices.DeleteFunc(h.items, func(it heapItem) bool { return !isQueued(it.seq) })
	slices.SortFunc(kept, heapItem.compare)
	h.items = slices.Compact(kept)
}

// peek returns the best entry whose job is queued, discarding stale ones
// above it. It does not remove it: the caller moves the job out of the
// queued state, which makes the entry stale.
func (h *jobHeap) peek(isQueued func(seq uint64) bool) (heapItem, bool) {
	for len(h.items) > 0 {
		top := h.items[0]
		if isQueued(top.seq) {
			return top, true
		}
		n := len(h.items) - 1
		h.items[0] = h.items[n]
		h.items = h.items[:n]
		if n > 0 {
			h.down(0)
		}
	}
	return heapItem{}, false
}

func (h *jobHeap) up(i int)   { siftUp(h.items, i) }
func (h *jobHeap) down(i int) { siftDown(h.items, i) }

// ordered is a heap entry: before says which of two comes out first.
type ordered[T any] interface{ before(T) bool }

func siftUp[T ordered[T]](items []T, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !items[i].before(items[p]) {
			return
		}
		items[i], items[p] = items[p], items[i]
		i = p
	}
}

func siftDown[T ordered[T]](items []T, i int) {
	n := len(items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && items[r].before(items[l]) {
			m = r
		}
		if !items[m].before(items[i]) {
			return
		}
		items[i], items[m] = items[m], items[i]
		i = m
	}
}
