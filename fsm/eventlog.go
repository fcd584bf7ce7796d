package fsm

import "sort"

// eventChunk is how many events one chunk of the log holds.
const eventChunk = 4096

// eventLog is the bounded event log: fixed-size chunks, oldest first. It
// never reallocates or copies events as it grows and shrinks (a flat slice
// that drops from the front and appends at the back regrows the whole log
// every few thousand events, a pause of tens of milliseconds at 100,000
// events). A snapshot copies the chunk headers: appends write past the
// length its copy of the last chunk has, drops only move the head, so the
// snapshot's events are never overwritten.
type eventLog struct {
	chunks [][]Event // every chunk but the last is full
	head   int       // index of the oldest event in chunks[0]
	n      int       // events kept
}

func (l *eventLog) len() int { return l.n }

// at returns the i-th kept event, oldest first.
func (l *eventLog) at(i int) *Event {
	i += l.head
	return &l.chunks[i/eventChunk][i%eventChunk]
}

func (l *eventLog) push(ev Event) {
	last := len(l.chunks) - 1
	if last < 0 || len(l.chunks[last]) == eventChunk {
		l.chunks = append(l.chunks, make([]Event, 0, eventChunk))
		last++
	}
	l.chunks[last] = append(l.chunks[last], ev)
	l.n++
}

// drop forgets the n oldest events.
func (l *eventLog) drop(n int) {
	n = min(n, l.n)
	l.head += n
	l.n -= n
	for len(l.chunks) > 0 && (l.head >= eventChunk || l.n == 0) {
		l.chunks[0] = nil
		l.chunks = l.chunks[1:]
		l.head = max(0, l.head-eventChunk)
	}
	if l.n == 0 {
		l.chunks, l.head = nil, 0
	}
}

// view returns a copy that keeps reading the current events whatever the
// log does next.
func (l *eventLog) view() eventLog {
	c := *l
	c.chunks = append([][]Event(nil), l.chunks...)
	return c
}

// copyRange returns events [from, to) as a new slice.
func (l *eventLog) copyRange(from, to int) []Event {
	out := make([]Event, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, *l.at(i))
	}
	return out
}

// firstAtOrAfter returns the index of the first event with Time >= t. Event
// times never decrease, so the older ones are a prefix.
func (l *eventLog) firstAtOrAfter(t int64) int {
	return sort.Search(l.n, func(i int) bool { return l.at(i).Time >= t })
}
