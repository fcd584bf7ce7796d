package fsm

import (
	"math/rand/v2"
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
		switch x.hash(id) & last {
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
