package api

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The answer deadline of a heartbeat stream, over random streams of
// batches and idle ticks: every batch finds the deadline set 1.5 to 2
// bounds ahead of it (a held Send is cut off within 2 bounds), the
// deadline never passes while nothing is written (it would reset a stream
// the idle check keeps), and a stream that beats steadily sets it about
// once per half bound, not around every batch.
func TestAnswerDeadline(t *testing.T) {
	const bound = 3 * time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		d := answerDeadline{bound: bound}
		start := time.Unix(1_000_000, 0)
		set := start.Add(-time.Hour) // what the stream has: none yet
		cleared := true
		tick := start.Add(bound)
		now := start
		batches, sets := 0, 0
		// A worker's cadence for this run: beats 1 ms to 0.9 bound apart,
		// each batch taking up to 50 ms to write; in half the runs, one
		// gap in five is instead up to 1.9 bounds long (the idle check may
		// end such a stream, but the deadline must not).
		gap := time.Millisecond + time.Duration(rng.Int64N(int64(9*bound/10)))
		long := run%2 == 1
		for now.Before(start.Add(40 * bound)) {
			next := now.Add(gap)
			if long && rng.IntN(5) == 0 {
				next = now.Add(time.Duration(rng.Int64N(int64(19 * bound / 10))))
			}
			for !tick.After(next) { // the idle ticks before the next batch
				if !cleared && !tick.Before(set) {
					t.Fatalf("run %d: the deadline %s passed between batches, at the tick %s", run, set.Sub(start), tick.Sub(start))
				}
				if d.idle(tick) {
					cleared = true
				}
				tick = tick.Add(bound)
			}
			if !cleared && !next.Before(set) {
				t.Fatalf("run %d: the deadline %s passed before the batch at %s", run, set.Sub(start), next.Sub(start))
			}
			now = next
			if at, ok := d.batch(now); ok {
				set, cleared = at, false
				sets++
			}
			batches++
			if cleared {
				t.Fatalf("run %d: a batch at %s written with no deadline", run, now.Sub(start))
			}
			if ahead := set.Sub(now); ahead < 3*bound/2 || ahead > 2*bound {
				t.Fatalf("run %d: a batch at %s found the deadline %s ahead, want 1.5 to 2 bounds", run, now.Sub(start), ahead)
			}
			now = now.Add(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
		}
		// Set at most once per half bound of batches and once after each
		// tick's clear; with beats closer than a tenth of a bound, once
		// per four batches or fewer (it was twice per batch).
		if limit := 40*2 + 40 + 1; sets > limit || !long && gap < bound/10 && sets*4 > batches {
			t.Fatalf("run %d: %d deadlines set for %d batches %s apart", run, sets, batches, gap)
		}
	}
}
