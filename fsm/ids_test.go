package fsm

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// seqIDs is an idSource for the index alone.
type seqIDs map[uint64]string

func (m seqIDs) idOf(seq uint64) string { return m[seq] }

// TestIDIndexAgainstAMap drives the id index with random sets and removes,
// small tables first (so probe runs wrap around the end and overlap), and
// after every step finds every id kept and a few not kept, as a map would.
func TestIDIndexAgainstAMap(t *testing.T) {
	for _, universe := range []int{8, 40, 3000} {
		t.Run(strconv.Itoa(universe), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(universe), 1))
			x := newIDIndex()
			want := map[string]uint64{} // id -> seq
			src := seqIDs{}
			var seq uint64
			check := func(step int) {
				t.Helper()
				if x.len() != len(want) {
					t.Fatalf("step %d: %d entries, want %d", step, x.len(), len(want))
				}
				for id, s := range want {
					if got, ok := x.find(id, src); !ok || got != s {
						t.Fatalf("step %d: find(%s) = %d, %v; want %d", step, id, got, ok, s)
					}
				}
				for range 3 {
					id := "absent-" + strconv.Itoa(rng.IntN(1000))
					if got, ok := x.find(id, src); ok {
						t.Fatalf("step %d: find(%s) = %d for an id never set", step, id, got)
					}
				}
			}
			steps := 20 * universe
			for step := range steps {
				id := "job-" + strconv.Itoa(rng.IntN(universe))
				// Grow for the first half, then mostly remove, so the table
				// shrinks too.
				if rng.IntN(steps) < step && len(want) > 0 || rng.IntN(3) == 0 {
					x.remove(id, src)
					delete(want, id)
				} else {
					seq++
					src[seq] = id
					x.set(id, seq, src)
					want[id] = seq
				}
				if universe < 100 || step%97 == 0 {
					check(step)
				}
			}
			check(steps)
		})
	}
}

// TestIDIndexShrinks: a table emptied by removes gives its slots back.
func TestIDIndexShrinks(t *testing.T) {
	x := newIDIndex()
	src := seqIDs{}
	for i := range 10000 {
		seq := uint64(i + 1)
		src[seq] = "j" + strconv.Itoa(i)
		x.set(src[seq], seq, src)
	}
	grown := len(x.seqs)
	for i := range 9990 {
		x.remove("j"+strconv.Itoa(i), src)
	}
	if len(x.seqs) >= grown/4 || x.len() != 10 {
		t.Fatalf("%d slots for %d entries (%d when full)", len(x.seqs), x.len(), grown)
	}
	for i := 9990; i < 10000; i++ {
		if seq, ok := x.find("j"+strconv.Itoa(i), src); !ok || seq != uint64(i+1) {
			t.Fatalf("j%d: %d, %v after the shrink", i, seq, ok)
		}
	}
}

// TestTokenIndexAgainstAMap grants tokens in order, forgets random ones
// (so the index squeezes its dead pairs several times), and compares with
// a map; then rebuilds it from shuffled pairs as a restore does.
func TestTokenIndexAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var x tokenIndex
	want := map[uint64]uint64{}
	var next uint64
	squeezes, lastLen := 0, 0
	var kept []uint64 // want's tokens, to pick one at random
	for step := range 20000 {
		// Forget 1 in 5 steps in the first half, 3 in 5 in the second.
		if rng.IntN(5) < 1+2*(step/10000) && len(kept) > 0 {
			i := rng.IntN(len(kept))
			tok := kept[i]
			kept[i] = kept[len(kept)-1]
			kept = kept[:len(kept)-1]
			x.remove(tok)
			x.remove(tok) // twice is once
			delete(want, tok)
		} else {
			next += 1 + uint64(rng.IntN(3))
			seq := uint64(rng.IntN(1000) + 1)
			x.add(next, seq)
			want[next] = seq
			kept = append(kept, next)
		}
		if len(x.pairs) < lastLen {
			squeezes++
		}
		lastLen = len(x.pairs)
		if x.len() != len(want) {
			t.Fatalf("step %d: %d kept, want %d", step, x.len(), len(want))
		}
		if step%101 == 0 {
			for tok := range next + 2 {
				got, ok := x.find(tok)
				if w, kept := want[tok]; ok != kept || got != w {
					t.Fatalf("step %d: find(%d) = %d, %v; want %d, %v", step, tok, got, ok, w, kept)
				}
			}
		}
	}
	if squeezes == 0 {
		t.Fatal("the index never squeezed out its dead pairs")
	}

	var pairs []leaseEntry
	for tok, seq := range want { // map order: shuffled
		pairs = append(pairs, leaseEntry{token: tok, seq: seq})
	}
	pairs = append(pairs, pairs[0]) // a token listed twice is kept once
	r := restoredTokens(pairs)
	if r.len() != len(want) {
		t.Fatalf("restored %d, want %d", r.len(), len(want))
	}
	for tok, seq := range want {
		if got, ok := r.find(tok); !ok || got != seq {
			t.Fatalf("restored find(%d) = %d, %v; want %d", tok, got, ok, seq)
		}
	}
	// A token below the last is put in its place, and found.
	r.add(0, 99)
	if got, ok := r.find(0); !ok || got != 99 || r.pairs[0].token != 0 {
		t.Fatalf("find(0) = %d, %v after adding it below the rest", got, ok)
	}
}

// TestIDIndexWrapsAround fills the last slots of a small table with ids
// whose home is the last slot, so their probe runs wrap to the front, and
// removes them in an order that moves entries back across the end.
func TestIDIndexWrapsAround(t *testing.T) {
	x := newIDIndex()
	src := seqIDs{}
	var seq uint64
	set := func(id string) {
		seq++
		src[seq] = id
		x.set(id, seq, src)
	}
	set("grow") // a table of 16 slots
	const last = 15
	if len(x.seqs) != last+1 {
		t.Fatalf("%d slots, want %d", len(x.seqs), last+1)
	}
	var wrapped, front []string // homes at the last slot; at slot 0
	for i := 0; len(wrapped) < 4 || len(front) < 2; i++ {
		id := "w" + strconv.Itoa(i)
		switch home(x.hash(id), last+1) {
		case last:
			if len(wrapped) < 4 {
				wrapped = append(wrapped, id)
			}
		case 0:
			if len(front) < 2 {
				front = append(front, id)
			}
		}
	}
	x.remove("grow", src)
	// Slots 15, 0, 1, 2 take the wrapped ids; then the front ids, homed
	// at 0, go to 3 and 4.
	for _, id := range append(append([]string{}, wrapped...), front...) {
		set(id)
	}
	if x.seqs[last] == 0 || x.seqs[0] == 0 || x.seqs[4] == 0 {
		t.Fatalf("probe runs did not wrap: slots %v", x.seqs)
	}
	kept := map[string]bool{}
	for _, id := range append(append([]string{}, wrapped...), front...) {
		kept[id] = true
	}
	for _, id := range []string{wrapped[0], front[0], wrapped[2], wrapped[1], front[1], wrapped[3]} {
		x.remove(id, src)
		delete(kept, id)
		for k := range kept {
			if _, ok := x.find(k, src); !ok {
				t.Fatalf("after removing %s: %s is lost (slots %v)", id, k, x.seqs)
			}
		}
		if _, ok := x.find(id, src); ok || x.len() != len(kept) {
			t.Fatalf("after removing %s: still found, or %d entries for %d", id, x.len(), len(kept))
		}
	}
}

// TestTokenIndexAddsOutOfOrder: a token added again takes over its pair,
// a forgotten one's pair comes back to life, and a token below the last
// is put in its place among the dead pairs; the count stays right through
// all three and the next squeeze.
func TestTokenIndexAddsOutOfOrder(t *testing.T) {
	var x tokenIndex
	for tok := uint64(10); tok <= 200; tok += 10 {
		x.add(tok, tok)
	}
	x.remove(50)
	x.remove(60)
	x.add(40, 7) // again, live: its seq changes
	x.add(50, 8) // again, dead: it lives again
	x.add(55, 9) // below the last, beside a dead pair
	want := map[uint64]uint64{40: 7, 50: 8, 55: 9}
	for tok := uint64(10); tok <= 200; tok += 10 {
		if _, ok := want[tok]; !ok && tok != 60 {
			want[tok] = tok
		}
	}
	check := func(when string) {
		t.Helper()
		if x.len() != len(want) {
			t.Fatalf("%s: %d kept, want %d", when, x.len(), len(want))
		}
		for tok := range uint64(210) {
			got, ok := x.find(tok)
			if w, kept := want[tok]; ok != kept || got != w {
				t.Fatalf("%s: find(%d) = %d, %v; want %d, %v", when, tok, got, ok, w, kept)
			}
		}
		for i := 1; i < len(x.pairs); i++ {
			if x.pairs[i].token <= x.pairs[i-1].token {
				t.Fatalf("%s: pairs out of order at %d: %v", when, i, x.pairs)
			}
		}
	}
	check("after the adds")
	x.squeeze()
	check("after a squeeze")
	if len(x.pairs) != len(want) {
		t.Fatalf("%d pairs after a squeeze, %d kept", len(x.pairs), len(want))
	}
}

// TestIDIndexBuild: an index built at once from a restore's entries finds
// what one filled by set in seq order finds (an id given twice names the
// higher seq), and verify finds nothing wrong with
// either; on small tables, so that probe runs wrap and overlap.
func TestIDIndexBuild(t *testing.T) {
	// The size set arrives at after n sets of distinct ids.
	sizedFor := func(n int) []uint64 {
		x, src := newIDIndex(), seqIDs{}
		for i := range n {
			src[uint64(i+1)] = strconv.Itoa(i)
			x.set(src[uint64(i+1)], uint64(i+1), src)
		}
		return x.seqs
	}
	for _, n := range []int{0, 1, 12, 13, 40, 3000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 2))
			src := seqIDs{}
			bySet := newIDIndex()
			built := idIndex{seed: bySet.seed}
			want := map[string]uint64{}
			var entries []idEntry
			for i := range n {
				seq := uint64(i + 1)
				id := "job-" + strconv.Itoa(rng.IntN(n*3/4+1)) // some ids twice
				src[seq] = id
				bySet.set(id, seq, src)
				want[id] = seq
				entries = append(entries, built.entry(id, seq))
			}
			rng.Shuffle(len(entries), func(i, k int) { entries[i], entries[k] = entries[k], entries[i] })
			built.build(slices.Clone(entries), src)
			// build sizes the table for every entry it is given, duplicates
			// included (a restore's check refuses those anyway).
			if built.len() != len(want) || bySet.len() != len(want) || len(built.seqs) != len(sizedFor(n)) {
				t.Fatalf("built: %d entries in %d slots; by set: %d in %d; want %d entries",
					built.len(), len(built.seqs), bySet.len(), len(bySet.seqs), len(want))
			}
			for id, seq := range want {
				if got, ok := built.find(id, src); !ok || got != seq {
					t.Fatalf("find(%s) = %d, %v in the built index; want %d", id, got, ok, seq)
				}
			}
			// verify takes one entry per kept job: the seqs the ids name.
			var kept []idEntry
			for id, seq := range want {
				kept = append(kept, built.entry(id, seq))
			}
			for name, x := range map[string]*idIndex{"built": &built, "by set": &bySet} {
				x.verify(slices.Clone(kept), src, func(seq, found uint64) {
					t.Errorf("%s: verify says id %s of seq %d leads to %d", name, src[seq], seq, found)
				})
			}
			// An index that counts no entry finds nothing, as find would say,
			// whatever its slots still hold.
			emptied := built
			emptied.n = 0
			reported := 0
			emptied.verify(slices.Clone(kept), src, func(_, found uint64) {
				if found == 0 {
					reported++
				}
			})
			if reported != len(kept) {
				t.Fatalf("an index counting no entry: verify reported %d of %d as not found", reported, len(kept))
			}
			// A seq its id does not name (the lower of a twice-given id) is
			// reported with the seq find answers instead.
			for _, e := range entries {
				if id := src[e.seq]; want[id] != e.seq {
					var reported [][2]uint64
					built.verify([]idEntry{e}, src, func(seq, found uint64) { reported = append(reported, [2]uint64{seq, found}) })
					if len(reported) != 1 || reported[0] != [2]uint64{e.seq, want[id]} {
						t.Fatalf("verify of seq %d (id %s, named by %d): reported %v", e.seq, id, want[id], reported)
					}
					break
				}
			}
		})
	}
}

// TestByHome: byHome puts entries in the order of their home slots, in
// tables of any size, and loses or repeats none, for more entries and
// fewer than its buckets.
func TestByHome(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 100, 5000, 100000} {
		entries := make([]idEntry, n)
		for i := range entries {
			entries[i] = idEntry{hash: rng.Uint32(), seq: uint64(i + 1)}
		}
		if n > 2 {
			entries[1].hash = entries[0].hash // a hash twice
		}
		want := slices.Clone(entries)
		bySeq := func(a, b idEntry) int { return cmpU64(a.seq, b.seq) }
		byHome(entries)
		for _, size := range []int{16, 20, 28, 1536, sizeFor(n), 1 << 21} {
			if !slices.IsSortedFunc(entries, func(a, b idEntry) int {
				return cmpU64(uint64(home(a.hash, size)), uint64(home(b.hash, size)))
			}) {
				t.Fatalf("%d entries: not in home order for %d slots", n, size)
			}
		}
		got := slices.Clone(entries)
		slices.SortFunc(got, bySeq)
		if !slices.Equal(got, want) {
			t.Fatalf("%d entries: entries lost or repeated", n)
		}
	}
}

// TestSizeFor: the table sizes are 4 to 7 times a power of two, each the
// smallest at most three quarters full, and home maps every hash into the
// table, the extremes to its first and last slot.
func TestSizeFor(t *testing.T) {
	prev := 0
	for n := 0; n < 5000; n++ {
		size := sizeFor(n)
		if size < 16 || n*4 > size*3 {
			t.Fatalf("sizeFor(%d) = %d: too small", n, size)
		}
		q := 1 << (bits.Len(uint(size)) - 3)
		if size%q != 0 || size/q < 4 || size/q > 7 {
			t.Fatalf("sizeFor(%d) = %d: not 4 to 7 times a power of two", n, size)
		}
		if size != prev && prev != 0 && size > prev*5/4 {
			t.Fatalf("sizeFor(%d) = %d: more than a step past %d", n, size, prev)
		}
		prev = size
		if home(0, size) != 0 || home(^uint32(0), size) != uint32(size-1) {
			t.Fatalf("%d slots: homes %d and %d for the extreme hashes", size, home(0, size), home(^uint32(0), size))
		}
	}
	if got := sizeFor(1000000); got != 1572864 {
		t.Fatalf("sizeFor(1,000,000) = %d, want 1,572,864 (3 << 19)", got)
	}
}

// keptIn yields the kept leases of a range of tokens, in order, and
// skips the pairs of leases no longer kept.
func TestTokenIndexKeptIn(t *testing.T) {
	var x tokenIndex
	for tok := uint64(10); tok <= 20; tok++ {
		x.add(tok, tok*100)
	}
	x.remove(13)
	var got []uint64
	for tok, seq := range x.keptIn(12, 15) {
		if seq != tok*100 {
			t.Fatalf("token %d: seq %d", tok, seq)
		}
		got = append(got, tok)
	}
	if !slices.Equal(got, []uint64{12, 14, 15}) {
		t.Fatalf("kept in [12, 15]: %v", got)
	}
	for tok := range x.keptIn(21, 30) {
		t.Fatalf("token %d past the last", tok)
	}
	got = got[:0]
	for tok := range x.keptIn(0, 10) {
		got = append(got, tok)
	}
	if !slices.Equal(got, []uint64{10}) {
		t.Fatalf("kept in [0, 10]: %v", got)
	}
}
