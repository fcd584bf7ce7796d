package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// beatLoop is scale's open loop: every ready worker heartbeats once per
// renew, in a slot of its own spread evenly over the renew (worker i at
// i/workers of it), whatever its previous heartbeat is doing. One goroutine
// walks the slots in time order and starts each heartbeat in a goroutine of
// its own, so a slow answer never delays a later slot, and a heartbeat's
// latency counts from its slot, not from its send: a server that falls
// behind shows it as latency, and a generator that falls behind shows it
// too (coordinated omission is impossible by construction).
//
// Per worker the loop keeps one flag, not a goroutine or a timer: a
// hundred thousand workers cost a few hundred kilobytes.
type beatLoop struct {
	workers int
	renew   time.Duration
	origin  time.Time
	ready   []atomic.Bool
	beat    func(ctx context.Context, i int, due time.Time, inWindow bool)

	unsent func(i int, due time.Time, inWindow bool)
	// maxInFlight bounds the heartbeats in flight. Past it a heartbeat is
	// not sent but counted (unsent): a server far behind would otherwise
	// have the loop hold a goroutine and a request for every heartbeat due
	// meanwhile, gigabytes at a hundred thousand workers.
	maxInFlight int64
	inFlight    atomic.Int64

	// Heartbeats in flight run on these contexts, which stop cancels. Each
	// registers with its parent, under the parent's lock: spread over many
	// parents, tens of thousands in flight do not queue on one lock.
	parents []context.Context
	cancels []context.CancelFunc
	stopc   chan struct{}
	done    chan struct{} // closed when the dispatcher returns
	wg      sync.WaitGroup
	once    sync.Once

	cursor atomic.Int64 // unix ns of the next slot the dispatcher will start
	win    atomic.Pointer[beatWindow]
}

// beatWindow is the measured window: heartbeats due in [from, to).
type beatWindow struct {
	from, to time.Time
	pending  sync.WaitGroup // heartbeats due in it, not yet finished
	passed   chan struct{}  // closed once every heartbeat due in it was started
	once     sync.Once
}

// slotTime is when worker i's k-th heartbeat is due.
func slotTime(origin time.Time, renew time.Duration, workers, k, i int) time.Time {
	return origin.Add(time.Duration(k)*renew + time.Duration(int64(renew)*int64(i)/int64(workers)))
}

// beatParents is how many parent contexts the heartbeats in flight share.
const beatParents = 64

// startBeatLoop starts the dispatcher; no worker is ready yet. beat sends a
// heartbeat; unsent counts one the bound on heartbeats in flight held back.
func startBeatLoop(ctx context.Context, workers int, renew time.Duration, maxInFlight int,
	beat func(ctx context.Context, i int, due time.Time, inWindow bool), unsent func(i int, due time.Time, inWindow bool)) *beatLoop {
	l := &beatLoop{workers: workers, renew: renew, origin: time.Now(), ready: make([]atomic.Bool, workers), beat: beat,
		unsent: unsent, maxInFlight: int64(maxInFlight), stopc: make(chan struct{}), done: make(chan struct{})}
	for range beatParents {
		p, cancel := context.WithCancel(ctx)
		l.parents, l.cancels = append(l.parents, p), append(l.cancels, cancel)
	}
	l.cursor.Store(l.origin.UnixNano())
	go l.run()
	return l
}

// setReady starts worker i's heartbeats from its next slot.
func (l *beatLoop) setReady(i int) { l.ready[i].Store(true) }

func (l *beatLoop) run() {
	defer close(l.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	k, i := 0, 0
	due := l.origin
	for {
		if wait := time.Until(due); wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-l.stopc:
				return
			case <-l.parents[0].Done(): // the caller's context ended
				return
			}
		}
		// Every slot due by now, even many at once after a stall: an open
		// loop never skips a heartbeat, it only sends it late.
		for now := time.Now(); !due.After(now); {
			if l.ready[i].Load() {
				l.start(i, due)
			}
			if i++; i == l.workers {
				i, k = 0, k+1
			}
			due = slotTime(l.origin, l.renew, l.workers, k, i)
			l.cursor.Store(due.UnixNano())
			if w := l.win.Load(); w != nil && !due.Before(w.to) {
				w.once.Do(func() { close(w.passed) })
			}
		}
	}
}

func (l *beatLoop) start(i int, due time.Time) {
	w := l.win.Load()
	in := w != nil && !due.Before(w.from) && due.Before(w.to)
	if l.inFlight.Load() >= l.maxInFlight {
		l.unsent(i, due, in)
		return
	}
	l.inFlight.Add(1)
	if in {
		w.pending.Add(1)
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer l.inFlight.Add(-1)
		if in {
			defer w.pending.Done()
		}
		l.beat(l.parents[i%beatParents], i, due, in)
	}()
}

// setWindow makes the heartbeats due in [from, to) the measured ones. The
// loop must not have reached from yet.
func (l *beatLoop) setWindow(from, to time.Time) (*beatWindow, error) {
	if cur := time.Unix(0, l.cursor.Load()); !cur.Before(from) {
		return nil, fmt.Errorf("the heartbeat loop is at %s, past the window's start %s: it fell behind its schedule",
			cur.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano))
	}
	w := &beatWindow{from: from, to: to, passed: make(chan struct{})}
	l.win.Store(w)
	return w, nil
}

// settle waits until every heartbeat due in the window has been sent and
// answered (or abandoned at its deadline).
func (w *beatWindow) settle(ctx context.Context) error {
	select {
	case <-w.passed:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.pending.Wait()
	return nil
}

// overlaps reports whether the span [a, b] meets the window.
func (w *beatWindow) overlaps(a, b time.Time) bool {
	return w != nil && a.Before(w.to) && b.After(w.from)
}

// stop sends no more heartbeats, cancels those in flight and waits for
// them. Safe to call more than once.
func (l *beatLoop) stop() {
	l.once.Do(func() { close(l.stopc) })
	<-l.done
	for _, cancel := range l.cancels {
		cancel()
	}
	l.wg.Wait()
}
