package fsm

import "testing"

func TestEventLogChunks(t *testing.T) {
	var l eventLog
	next, oldest := uint64(1), uint64(1)
	push := func(n int) {
		for range n {
			l.push(Event{Seq: next, Time: int64(next)})
			next++
		}
	}
	verify := func(v *eventLog, first uint64, n int) {
		t.Helper()
		if v.len() != n {
			t.Fatalf("len %d, want %d", v.len(), n)
		}
		for i := range n {
			if got := v.at(i).Seq; got != first+uint64(i) {
				t.Fatalf("event %d has seq %d, want %d", i, got, first+uint64(i))
			}
		}
	}
	push(eventChunk + 10)
	view := l.view()
	viewFirst, viewLen := oldest, l.len()
	l.drop(eventChunk + 3) // crosses a chunk boundary
	oldest += eventChunk + 3
	push(3 * eventChunk) // appends into the chunk the view shares
	verify(&l, oldest, int(next-oldest))
	verify(&view, viewFirst, viewLen)
	if i := l.firstAtOrAfter(int64(oldest + 5)); i != 5 {
		t.Fatalf("firstAtOrAfter: %d", i)
	}
	l.drop(l.len())
	if l.len() != 0 || l.chunks != nil {
		t.Fatal("log not empty after dropping everything")
	}
	push(1)
	verify(&l, next-1, 1)
}
