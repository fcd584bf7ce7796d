package fsm

// Spare ready heaps. When workers keep up with the executors, a queue is
// empty between one job and the next: its last job leaving took its ready
// heap, its submitter's heap and the queue's table of kinds with it, and
// the next job made them again: six allocations a job (the heaps, their
// entry arrays, the table and its group of slots, the last of the job's own
// size class). A few emptied ones are kept for the next queue that needs
// one instead.
//
// An emptied heap becomes a spare only once the apply that emptied it is
// done (recycle): until then an acquire's list of candidate heaps, or a
// cancel by submitter, may still hold it, and must not see it reused for
// another queue. What is kept is bounded: at most spareHeaps heaps, each
// keeping room for at most spareHeapItems entries, and one table of kinds
// that never held more than spareKindsMost kinds (a map keeps the room it
// once needed, and iterating it costs that room).
const (
	spareHeaps     = 8
	spareHeapItems = 64
	spareKindsMost = 8
)

// spares is the state's recycling of emptied heaps and tables of kinds.
// It is derived, like the indexes: only the functions below and the
// invariant check touch it, and a restored state starts without.
type spares struct {
	heaps   []*jobHeap // ready for reuse, empty
	emptied []*jobHeap // emptied by the running apply
	kinds   map[string]*jobHeap
	// emptiedKinds is a table of kinds emptied by the running apply.
	emptiedKinds map[string]*jobHeap
	// wide holds the queues whose table of kinds has held more than
	// spareKindsMost kinds: theirs is not kept.
	wide map[string]struct{}
}

// newHeap returns an empty heap, a spare one if there is one.
func (s *state) newHeap() *jobHeap {
	sp := &s.spare
	if n := len(sp.heaps); n > 0 {
		h := sp.heaps[n-1]
		sp.heaps[n-1] = nil
		sp.heaps = sp.heaps[:n-1]
		return h
	}
	return &jobHeap{}
}

// heapEmptied takes a heap its index just dropped.
func (s *state) heapEmptied(h *jobHeap) {
	sp := &s.spare
	if len(sp.heaps)+len(sp.emptied) < spareHeaps {
		sp.emptied = append(sp.emptied, h)
	}
}

// newKinds returns an empty table of a queue's ready heaps by kind.
func (s *state) newKinds() map[string]*jobHeap {
	if k := s.spare.kinds; k != nil {
		s.spare.kinds = nil
		return k
	}
	return map[string]*jobHeap{}
}

// kindAdded notes that queue q's table of kinds grew to n kinds.
func (s *state) kindAdded(q string, n int) {
	if n <= spareKindsMost {
		return
	}
	if s.spare.wide == nil {
		s.spare.wide = map[string]struct{}{}
	}
	s.spare.wide[q] = struct{}{}
}

// kindsEmptied takes queue q's table of kinds, which the ready index just
// dropped (empty).
func (s *state) kindsEmptied(q string, kinds map[string]*jobHeap) {
	if _, wide := s.spare.wide[q]; wide {
		delete(s.spare.wide, q)
		return
	}
	if s.spare.kinds == nil && s.spare.emptiedKinds == nil {
		s.spare.emptiedKinds = kinds
	}
}

// recycle makes what the apply just done emptied into spares.
func (s *state) recycle() {
	sp := &s.spare
	for i, h := range sp.emptied {
		h.live = 0
		if cap(h.items) > spareHeapItems {
			h.items = nil
		} else {
			h.items = h.items[:0]
		}
		sp.heaps = append(sp.heaps, h)
		sp.emptied[i] = nil
	}
	sp.emptied = sp.emptied[:0]
	if sp.emptiedKinds != nil {
		sp.kinds, sp.emptiedKinds = sp.emptiedKinds, nil
	}
}
