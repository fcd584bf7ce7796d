package fsm

// readyHeap orders the queued jobs of one (queue, kind): highest priority
// first, then oldest (lowest seq). The order is total, so which job is picked
// depends only on the set of queued jobs, never on the order of operations:
// a replica restored from a snapshot picks exactly like one that applied the
// whole log.
//
// Removal is lazy. A job leaves the queued state without being popped only
// by cancellation, which is terminal, so a stale entry can never be mistaken
// for a job that was queued again: pop skips entries whose job is gone or no
// longer queued, and the heap is rebuilt when stale entries outnumber live
// ones.
type readyHeap struct {
	items []readyItem
	live  int // entries whose job is queued
}

type readyItem struct {
	prio int32
	seq  uint64
}

func (a readyItem) before(b readyItem) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	return a.seq < b.seq
}

func (h *readyHeap) push(it readyItem) {
	h.items = append(h.items, it)
	h.up(len(h.items) - 1)
	h.live++
}

// peek returns the best live entry, discarding stale ones above it.
func (h *readyHeap) peek(isQueued func(seq uint64) bool) (readyItem, bool) {
	for len(h.items) > 0 {
		top := h.items[0]
		if isQueued(top.seq) {
			return top, true
		}
		h.popTop()
	}
	return readyItem{}, false
}

// take removes the top entry, which peek has just returned.
func (h *readyHeap) take() {
	h.popTop()
	h.live--
}

// dropped notes that a queued job in this heap left the queued state without
// being popped (it was cancelled); compact rebuilds when stale entries pile up.
func (h *readyHeap) dropped(isQueued func(seq uint64) bool) {
	h.live--
	if stale := len(h.items) - h.live; stale > 64 && stale > h.live {
		kept := h.items[:0]
		for _, it := range h.items {
			if isQueued(it.seq) {
				kept = append(kept, it)
			}
		}
		clear(h.items[len(kept):])
		h.items = kept
		for i := len(h.items)/2 - 1; i >= 0; i-- {
			h.down(i)
		}
	}
}

func (h *readyHeap) popTop() {
	n := len(h.items) - 1
	h.items[0] = h.items[n]
	h.items = h.items[:n]
	if n > 0 {
		h.down(0)
	}
}

func (h *readyHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.items[i].before(h.items[p]) {
			return
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *readyHeap) down(i int) {
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.items[r].before(h.items[l]) {
			m = r
		}
		if !h.items[m].before(h.items[i]) {
			return
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
}
