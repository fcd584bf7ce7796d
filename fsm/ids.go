package fsm

import (
	"hash/maphash"
	"iter"
	"math/bits"
	"slices"
)

// The two largest indexes, one entry per kept job and one per kept lease,
// are tables of their own rather than Go maps: a map[string]uint64 costs
// about 56 bytes a job and a map[uint64]uint64 about 38 a lease, where
// these cost about 16 to 20 and 18 (BenchmarkMemoryPerLiveLease). Each is a few
// large arrays, not a million small objects among the API's garbage.

// idIndex finds a job's seq from its id: an open-addressing hash table,
// probed linearly, of seqs and 32 bits of their id's hash. The ids stay in
// the jobs; a probe compares the hash bits first and reads the job's id
// only when they match. Zero is never a seq (seqs start at 1), so it marks
// an empty slot.
//
// A hash's home slot is its place among all 32-bit hashes scaled to the
// table (home), not its low bits, so the table need not be a power of two:
// it takes four sizes to each doubling (sizeFor), so it is 3/5 to 3/4 full
// as it grows, not 3/8 to 3/4 (a million jobs: 1,572,864 slots, 18.9
// bytes a job, where a power of two would be 2,097,152 and 25.2). And the
// homes follow the hashes' order, so the entries lie in the table nearly
// in that order (exactly after a build; a probe run puts an entry a few
// slots past its home, past the end for a run that wraps): a resize reads
// the old table in order and its writes move forward through the new one.
type idIndex struct {
	seed   maphash.Seed
	seqs   []uint64 // len is sizeFor of some count, or zero
	hashes []uint32 // the id's hash: its home slot is home(hash, len)
	n      int
}

// home is the slot in a table of size slots at which the probe for hash h
// begins: h's place in [0, 2^32) scaled to [0, size) by one multiply
// (Lemire's fast range), a function of h that never decreases.
func home(h uint32, size int) uint32 { return uint32(uint64(h) * uint64(size) >> 32) }

// next is the slot after i, the first after the last.
func (x *idIndex) next(i uint32) uint32 {
	if i++; int(i) == len(x.seqs) {
		return 0
	}
	return i
}

// idSource gives the id of a kept job: the index reads it to tell two ids
// of equal hash bits apart, and when it deletes.
type idSource interface{ idOf(seq uint64) string }

func newIDIndex() idIndex { return idIndex{seed: maphash.MakeSeed()} }

func (x *idIndex) len() int { return x.n }

func (x *idIndex) hash(id string) uint32 { return uint32(maphash.String(x.seed, id)) }

// find returns the seq of id, if kept.
func (x *idIndex) find(id string, src idSource) (uint64, bool) {
	if x.n == 0 {
		return 0, false
	}
	h := x.hash(id)
	for i := home(h, len(x.seqs)); ; i = x.next(i) {
		switch seq := x.seqs[i]; {
		case seq == 0:
			return 0, false
		case x.hashes[i] == h && src.idOf(seq) == id:
			return seq, true
		}
	}
}

// set makes id name seq, replacing what it named before (as a map's
// assignment does: a restore's check counts the entries to find ids kept
// twice).
func (x *idIndex) set(id string, seq uint64, src idSource) {
	if seq == 0 {
		panic("fsm: job seq 0")
	}
	if (x.n+1)*4 > len(x.seqs)*3 {
		x.resize(sizeFor(x.n + 1))
	}
	h := x.hash(id)
	i := home(h, len(x.seqs))
	for ; x.seqs[i] != 0; i = x.next(i) {
		if x.hashes[i] == h && src.idOf(x.seqs[i]) == id {
			x.seqs[i] = seq
			return
		}
	}
	x.seqs[i], x.hashes[i] = seq, h
	x.n++
}

// idEntry is a job's entry in the id index: its seq and its id's hash.
type idEntry struct {
	hash uint32
	seq  uint64
}

// entry is the index entry of job seq with id.
func (x *idIndex) entry(id string, seq uint64) idEntry { return idEntry{hash: x.hash(id), seq: seq} }

// sizeFor is the table size set arrives at for n entries: the smallest of
// 16, 20, 24, 28, 32, 40, 48, 56, 64, ... (4, 5, 6 and 7 times a power of
// two) at most three quarters full.
func sizeFor(n int) int {
	for q := 4; ; q *= 2 {
		for m := 4; m < 8; m++ {
			if n*4 <= m*q*3 {
				return m * q
			}
		}
	}
}

// byHome orders entries by their hash, and so by their home slot in a
// table of any size: the order in which build and verify sweep the table.
// It sorts in place, so that a million entries need no second 16 MB, by
// radix: a comparison sort of them cost more time than the random reads it
// saved.
func byHome(entries []idEntry) {
	hashSort(entries, 32)
}

// hashSort sorts entries by the bits below hi of their hash (the bits
// above are alike): American flag passes, most significant digit first,
// each digit about as wide as the entries are many, down to runs short
// enough for insertion.
func hashSort(entries []idEntry, hi int) {
	if len(entries) <= 16 || hi == 0 {
		for i := 1; i < len(entries); i++ {
			for k := i; k > 0 && entries[k].hash < entries[k-1].hash; k-- {
				entries[k], entries[k-1] = entries[k-1], entries[k]
			}
		}
		return
	}
	width := min(hi, bits.Len(uint(len(entries))), 11)
	shift := hi - width
	digit := func(e idEntry) int { return int(e.hash >> shift & (1<<width - 1)) }
	var nextBuf, endBuf [1 << 11]int
	next, end := nextBuf[:1<<width], endBuf[:1<<width]
	for _, e := range entries {
		end[digit(e)]++
	}
	at := 0
	for d, n := range end {
		next[d], end[d] = at, at+n
		at += n
	}
	for d := range next {
		for next[d] < end[d] {
			// The entry at the bucket's next place goes to its own bucket's,
			// and whatever was there comes here to be placed in turn.
			if k := digit(entries[next[d]]); k != d {
				entries[next[d]], entries[next[k]] = entries[next[k]], entries[next[d]]
				next[k]++
				continue
			}
			next[d]++
		}
	}
	if shift == 0 {
		return
	}
	lo := 0
	for _, e := range end {
		if e-lo > 1 {
			hashSort(entries[lo:e], shift)
		}
		lo = e
	}
}

// build fills an empty index with entries (a restore's jobs, in any order;
// the slice is reordered) as set would one by one in seq order: an id
// given twice names the higher seq. But the table is sized for all of them
// at once, and they go in in the order of their home slots, so the writes
// sweep the table once instead of landing at random: a million jobs' table
// is 19 MB, far beyond the caches.
func (x *idIndex) build(entries []idEntry, src idSource) {
	if x.n != 0 {
		panic("fsm: build on a non-empty id index")
	}
	if len(entries) == 0 {
		return
	}
	size := sizeFor(len(entries))
	x.seqs, x.hashes = make([]uint64, size), make([]uint32, size)
	byHome(entries)
	for _, e := range entries {
		if e.seq == 0 {
			panic("fsm: job seq 0")
		}
		i := home(e.hash, size)
		for ; x.seqs[i] != 0; i = x.next(i) {
			if x.hashes[i] == e.hash && src.idOf(x.seqs[i]) == src.idOf(e.seq) {
				break
			}
		}
		switch {
		case x.seqs[i] == 0:
			x.seqs[i], x.hashes[i] = e.seq, e.hash
			x.n++
		case e.seq > x.seqs[i]: // the same id again: the higher seq names it
			x.seqs[i] = e.seq
		}
	}
}

// verify calls bad for each entry (a check's, one per kept job; the slice
// is reordered) that find would not answer with the entry's own seq, with
// what find answers instead. It answers as find does, entry by entry, but
// in the order of their home slots, so its reads sweep the table once.
func (x *idIndex) verify(entries []idEntry, src idSource, bad func(seq, found uint64)) {
	if x.n == 0 { // as find: an empty index finds nothing, whatever its slots hold
		for _, e := range entries {
			bad(e.seq, 0)
		}
		return
	}
	byHome(entries)
	for _, e := range entries {
		var found uint64
		for i := home(e.hash, len(x.seqs)); x.seqs[i] != 0; i = x.next(i) {
			// The job's own seq needs no reading of its id.
			if x.hashes[i] == e.hash && (x.seqs[i] == e.seq || src.idOf(x.seqs[i]) == src.idOf(e.seq)) {
				found = x.seqs[i]
				break
			}
		}
		if found != e.seq {
			bad(e.seq, found)
		}
	}
}

// remove deletes id, if kept. Linear probing needs no tombstones: the
// entries after the hole that could live in it move back.
func (x *idIndex) remove(id string, src idSource) {
	if x.n == 0 {
		return
	}
	h := x.hash(id)
	i := home(h, len(x.seqs))
	for {
		seq := x.seqs[i]
		if seq == 0 {
			return
		}
		if x.hashes[i] == h && src.idOf(seq) == id {
			break
		}
		i = x.next(i)
	}
	for j := i; ; {
		j = x.next(j)
		if x.seqs[j] == 0 {
			break
		}
		// The entry at j stays unless its home is cyclically outside
		// (i, j]: then a probe from its home passes i, and it moves there.
		home := home(x.hashes[j], len(x.seqs))
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.seqs[i], x.hashes[i] = x.seqs[j], x.hashes[j]
			i = j
		}
	}
	x.seqs[i], x.hashes[i] = 0, 0
	x.n--
	if len(x.seqs) > 1024 && x.n*8 < len(x.seqs) {
		x.resize(sizeFor(2 * x.n)) // at most 3/8 full
	}
}

// resize moves every entry into a table of size slots (a sizeFor); the
// stored hashes place them, without reading a job. The old table holds
// them nearly in the order of their hashes (idIndex), so the writes to the
// new one move forward through it rather than land at random.
func (x *idIndex) resize(size int) {
	seqs, hashes := x.seqs, x.hashes
	x.seqs, x.hashes = make([]uint64, size), make([]uint32, size)
	for k, seq := range seqs {
		if seq == 0 {
			continue
		}
		i := home(hashes[k], size)
		for x.seqs[i] != 0 {
			i = x.next(i)
		}
		x.seqs[i], x.hashes[i] = seq, hashes[k]
	}
}

// tokenIndex finds the job of a kept lease from its token: (token, seq)
// pairs in ascending token order, searched by bisection. Tokens are
// granted in ascending order, so a grant appends; a lease no longer kept
// leaves its pair behind with seq zero until half the pairs are such, when
// they are squeezed out at once.
type tokenIndex struct {
	pairs []leaseEntry
	dead  int
}

func (t *tokenIndex) len() int { return len(t.pairs) - t.dead }

func (t *tokenIndex) search(tok uint64) (int, bool) {
	return slices.BinarySearchFunc(t.pairs, tok, func(e leaseEntry, tok uint64) int { return cmpU64(e.token, tok) })
}

// find returns the seq of the job keeping lease tok.
func (t *tokenIndex) find(tok uint64) (uint64, bool) {
	if i, ok := t.search(tok); ok && t.pairs[i].seq != 0 {
		return t.pairs[i].seq, true
	}
	return 0, false
}

// keptIn yields the token and job seq of each kept lease with a token in
// [lo, hi], in token order.
func (t *tokenIndex) keptIn(lo, hi uint64) iter.Seq2[uint64, uint64] {
	return func(yield func(tok, seq uint64) bool) {
		i, _ := t.search(lo)
		for ; i < len(t.pairs) && t.pairs[i].token <= hi; i++ {
			if e := t.pairs[i]; e.seq != 0 && !yield(e.token, e.seq) {
				return
			}
		}
	}
}

// add records a kept lease. Grants come in ascending token order and
// append; a token at or below the last one (granted only by the
// chaos_tokenreuse build, which breaks that order on purpose) is put in
// its place, or takes over its pair. A restore builds the index with
// restoredTokens instead.
func (t *tokenIndex) add(tok, seq uint64) {
	if n := len(t.pairs); n == 0 || t.pairs[n-1].token < tok {
		t.pairs = append(t.pairs, leaseEntry{token: tok, seq: seq})
		return
	}
	i, ok := t.search(tok)
	if ok {
		if t.pairs[i].seq == 0 {
			t.dead--
		}
		t.pairs[i].seq = seq
		return
	}
	t.pairs = slices.Insert(t.pairs, i, leaseEntry{token: tok, seq: seq})
}

// remove forgets a lease no longer kept.
func (t *tokenIndex) remove(tok uint64) {
	i, ok := t.search(tok)
	if !ok || t.pairs[i].seq == 0 {
		return
	}
	t.pairs[i].seq = 0
	t.dead++
	if t.dead >= 64 && t.dead*2 >= len(t.pairs) {
		t.squeeze()
	}
}

// squeeze drops the pairs of leases no longer kept, and the array's spare
// room when it is most of it.
func (t *tokenIndex) squeeze() {
	t.pairs = slices.DeleteFunc(t.pairs, func(e leaseEntry) bool { return e.seq == 0 })
	t.dead = 0
	if cap(t.pairs) > 2*len(t.pairs)+64 {
		t.pairs = slices.Clone(t.pairs)
	}
}

// restored builds the index from pairs in any order (a restore visits
// leases by job, not by token). A token listed twice is kept once, so the
// restore's count of kept leases finds it.
func restoredTokens(pairs []leaseEntry) tokenIndex {
	slices.SortFunc(pairs, func(a, b leaseEntry) int { return cmpU64(a.token, b.token) })
	pairs = slices.CompactFunc(pairs, func(a, b leaseEntry) bool { return a.token == b.token })
	return tokenIndex{pairs: slices.Clip(pairs)}
}
