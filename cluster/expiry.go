package cluster

import (
	"container/heap"
	"slices"
	"sync"
	"time"
)

// expiryTable is the leader's memory of when it last heard from each
// worker. It exists only while this node is the established leader: built
// at takeover, discarded when leadership is lost. Heartbeats never touch
// the log; they move a worker's lastHeard here.
//
// Deadlines only ever move later. A worker's leases are due when it has
// been silent for toleration since lastHeard; lastHeard moves forward on
// every request from the worker, restarts at takeover for every worker
// (the new leader did not witness the silence before it), and shifts by
// the gap when the timer loop itself was absent for longer than grace.
//
// Every registered worker is in the table, so that one silent for
// removeAfter can be removed: the holders of live leases and the workers
// heard this term fully timed, the others (registered, idle, not heard
// since takeover) timed only for removal.
//
// The work of a tick grows with what is due, not with the workers: each
// worker has one scheduled check (the next moment its silence could cross
// a threshold), kept in a heap. Hearing a worker only moves its lastHeard;
// when its check comes up early, the tick finds it heard and schedules the
// next one. So a worker costs a heap operation per grace, not per tick,
// and a heartbeat costs none.
type expiryTable struct {
	mu sync.Mutex
	expiryTimings
	workers  map[string]*workerClock
	lastTick time.Time
	checks   checkHeap
	// heardAgain are unreachable workers heard since the last tick: the
	// next tick announces them reachable.
	heardAgain map[string]bool
	// pending are the workers with decided expiries not yet seen to commit.
	pending map[string]bool
	// timed counts the workers not unheard; unreachable those of them
	// announced unreachable and not heard since.
	timed, unreachable int
}

// expiryTimings are the silences the table acts on.
type expiryTimings struct {
	grace       time.Duration // unreachable
	toleration  time.Duration // leases expire
	removeAfter time.Duration // a registered worker holding nothing is removed
}

type workerClock struct {
	id        string
	lastHeard time.Time
	// unheard marks a registered worker holding no lease that this leader
	// has not heard since it took office. It is timed only for removal:
	// the leader did not see it fall silent, so it announces nothing about
	// it. Hearing it, or finding it holding a lease, clears the mark.
	unheard bool
	// unreachable is set once the loop announced the worker unreachable and
	// cleared when it announces it reachable again.
	unreachable bool
	// expiring holds tokens whose expiry the loop decided. From that moment
	// a heartbeat answers them lost, even before the expiry commits: a
	// worker must never be told to keep going on a lease the leader is
	// ending.
	expiring map[uint64]bool
	// checkAt is the time of the worker's one live entry in the heap;
	// entries with another time are stale.
	checkAt time.Time
}

// newExpiryTable starts every worker afresh at takeover: a new leader never
// charges a worker for a silence it did not witness. holders hold live
// leases; idle are the other registered workers.
func newExpiryTable(timings expiryTimings, takeover time.Time, holders, idle []string) *expiryTable {
	t := &expiryTable{expiryTimings: timings, workers: map[string]*workerClock{}, lastTick: takeover,
		heardAgain: map[string]bool{}, pending: map[string]bool{}}
	for _, w := range idle {
		t.add(w, takeover, true)
	}
	for _, w := range holders {
		if c := t.workers[w]; c != nil {
			t.hear(c, takeover)
		} else {
			t.add(w, takeover, false)
		}
	}
	return t
}

// add starts timing a worker the table does not know (locked).
func (t *expiryTable) add(id string, heard time.Time, unheard bool) *workerClock {
	w := &workerClock{id: id, lastHeard: heard, unheard: unheard}
	t.workers[id] = w
	if !unheard {
		t.timed++
	}
	t.schedule(w, heard)
	return w
}

// hear records a request from a known worker (locked).
func (t *expiryTable) hear(w *workerClock, at time.Time) {
	if w.unheard {
		// Timed for its leases and reachability from now on: its check,
		// set for removal, is too late.
		w.unheard = false
		t.timed++
		if at.After(w.lastHeard) {
			w.lastHeard = at
		}
		t.schedule(w, at)
	} else if at.After(w.lastHeard) {
		w.lastHeard = at
	}
	if w.unreachable {
		t.heardAgain[w.id] = true
	}
}

// heard records a request from the worker that arrived at `at`, and returns
// the tokens whose expiry is already decided.
func (t *expiryTable) heard(worker string, at time.Time) map[uint64]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.workers[worker]
	if w == nil {
		w = t.add(worker, at, false)
	} else {
		t.hear(w, at)
	}
	if len(w.expiring) == 0 {
		return nil
	}
	out := make(map[uint64]bool, len(w.expiring))
	for tok := range w.expiring {
		out[tok] = true
	}
	return out
}

// expiringLease reports whether the expiry of the worker's lease tok is
// already decided (it is on its way to the log).
func (t *expiryTable) expiringLease(worker string, tok uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.workers[worker]
	return w != nil && w.expiring[tok]
}

// reachable reports whether the worker was heard within grace: by the
// table, or by a request that arrived at `arrived` (a parked long poll's
// worker may have been forgotten by the table meanwhile).
func (t *expiryTable) reachable(worker string, arrived, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := arrived
	if w := t.workers[worker]; w != nil && w.lastHeard.After(last) {
		last = w.lastHeard
	}
	return now.Sub(last) <= t.grace
}

// adopt starts timing, as heard at now, every worker in holders the table
// does not know. Holders come from the state: a live lease whose worker is
// not timed would never expire (a grant to a worker forgotten while its
// long poll was parked, one that committed while a restore rebuilt the
// table).
func (t *expiryTable) adopt(holders []string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range holders {
		switch w := t.workers[id]; {
		case w == nil:
			t.add(id, now, false)
		case w.unheard:
			// A holder is timed for its leases from now on.
			t.hear(w, now)
		}
	}
}

// nextCheck returns the time of the earliest check in the table, if it has
// one: the first moment a worker's silence may cross a threshold (the
// check may find it heard since, and only schedule the next).
func (t *expiryTable) nextCheck() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.checks) == 0 {
		return time.Time{}, false
	}
	return t.checks[0].at, true
}

// ticked records when a tick's work ended; the next tick measures the
// leader's absence from here.
func (t *expiryTable) ticked(end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if end.After(t.lastTick) {
		t.lastTick = end
	}
}

// decided returns the tokens whose expiry was decided and not yet seen to
// commit, by worker.
func (t *expiryTable) decided() map[string][]uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string][]uint64, len(t.pending))
	for id := range t.pending {
		w := t.workers[id]
		if w == nil {
			continue
		}
		for tok := range w.expiring {
			out[id] = append(out[id], tok)
		}
		slices.Sort(out[id])
	}
	return out
}

// tickResult is what one pass of the timer loop found.
type tickResult struct {
	gap         time.Duration // > 0: the loop was absent that long and shifted every deadline
	unreachable []string      // newly silent past grace
	reachable   []string      // heard again after being unreachable
	overdue     []string      // silent past toleration
	idle        []string      // silent past removeAfter (whether they hold a lease is the state's to say)
	looked      int           // workers the tick looked at (its work)
}

// tick applies the absence rule and reports the workers whose state
// changed. A gap longer than grace between two ticks means this leader was
// not watching (paused, starved, the machine asleep): every lastHeard moves
// forward by the gap, so nothing comes due because of it. Workers silent
// past toleration or removeAfter are reported again every recheck while
// they stay so (what acts on them re-checks and is idempotent).
func (t *expiryTable) tick(now time.Time) tickResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	var res tickResult
	if gap := now.Sub(t.lastTick); absenceRule && gap > t.grace {
		res.gap = gap
		t.shiftLocked(gap, now)
	}
	if now.After(t.lastTick) {
		t.lastTick = now
	}
	for id := range t.heardAgain {
		if w := t.workers[id]; w != nil && w.unreachable && now.Sub(w.lastHeard) <= t.grace {
			w.unreachable = false
			t.unreachable--
			res.reachable = append(res.reachable, id)
			t.schedule(w, now)
		}
	}
	clear(t.heardAgain)
	for len(t.checks) > 0 && !t.checks[0].at.After(now) {
		c := heap.Pop(&t.checks).(check)
		res.looked++
		w := t.workers[c.id]
		if w == nil || !w.checkAt.Equal(c.at) {
			continue // stale: rescheduled or gone
		}
		w.checkAt = time.Time{}
		silent := now.Sub(w.lastHeard)
		if silent > t.removeAfter {
			res.idle = append(res.idle, c.id)
		}
		if !w.unheard {
			if silent > t.grace && !w.unreachable {
				w.unreachable = true
				t.unreachable++
				res.unreachable = append(res.unreachable, c.id)
			}
			if silent > t.toleration {
				res.overdue = append(res.overdue, c.id)
			}
		}
		t.schedule(w, now)
	}
	slices.Sort(res.unreachable)
	slices.Sort(res.reachable)
	slices.Sort(res.overdue)
	slices.Sort(res.idle)
	return res
}

// recheck is how often a worker past a threshold is reported again while
// it stays silent.
func (t *expiryTable) recheck() time.Duration { return max(t.toleration/4, time.Millisecond) }

// schedule sets the worker's next check: the first moment after now its
// silence crosses a threshold it has not crossed yet, or the next recheck
// of one it has (locked). A check at a threshold T is due strictly after
// it (T + 1 ns), as the rules compare silence with ">".
func (t *expiryTable) schedule(w *workerClock, now time.Time) {
	var next time.Time
	at := func(c time.Time) {
		if c.After(now) && (next.IsZero() || c.Before(next)) {
			next = c
		}
	}
	past := func(d time.Duration) time.Time { return w.lastHeard.Add(d + time.Nanosecond) }
	silent := now.Sub(w.lastHeard)
	if !w.unheard {
		if !w.unreachable {
			at(past(t.grace))
		}
		at(past(t.toleration))
		if silent > t.toleration {
			at(now.Add(t.recheck()))
		}
	}
	at(past(t.removeAfter))
	if silent > t.removeAfter {
		at(now.Add(t.recheck()))
	}
	if next.IsZero() {
		next = now.Add(t.recheck())
	}
	if w.checkAt.Equal(next) {
		return
	}
	w.checkAt = next
	heap.Push(&t.checks, check{at: next, id: w.id})
}

// silentPastGrace counts the workers timed for their leases and
// reachability, and how many of them are announced unreachable (silent
// past grace as of the last tick).
func (t *expiryTable) silentPastGrace() (timed, silent int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.timed, t.unreachable
}

// shift moves every lastHeard forward by d, never beyond now: the leader
// does not charge workers for a silence it chose not to act on.
func (t *expiryTable) shift(d time.Duration, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shiftLocked(d, now)
}

func (t *expiryTable) shiftLocked(d time.Duration, now time.Time) {
	for _, w := range t.workers {
		w.lastHeard = minTime(w.lastHeard.Add(d), now)
		t.schedule(w, now)
	}
}

// markExpiring decides the expiry of a worker's tokens if, checked again
// under the lock, the worker is still silent past toleration, and says how
// long after toleration ran out. After it returns true, heartbeats answer
// those tokens lost.
func (t *expiryTable) markExpiring(worker string, tokens []uint64, now time.Time) (late time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.workers[worker]
	if w == nil || now.Sub(w.lastHeard) <= t.toleration {
		return 0, false
	}
	if w.expiring == nil {
		w.expiring = map[uint64]bool{}
	}
	for _, tok := range tokens {
		w.expiring[tok] = true
	}
	t.pending[worker] = true
	return now.Sub(w.lastHeard) - t.toleration, true
}

// expired clears tokens whose expiry committed: the state now says they are
// not live, and heartbeats learn that from it.
func (t *expiryTable) expired(worker string, tokens []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.workers[worker]; w != nil {
		for _, tok := range tokens {
			delete(w.expiring, tok)
		}
		if len(w.expiring) == 0 {
			delete(t.pending, worker)
		}
	}
}

// forget drops a worker the state no longer knows (deregistered while the
// table timed it) once it has been silent past toleration with no expiry
// pending. Registered workers stay until they are removed as idle.
func (t *expiryTable) forget(worker string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.workers[worker]
	if w == nil || now.Sub(w.lastHeard) <= t.toleration || len(w.expiring) > 0 {
		return
	}
	t.drop(w)
}

// drop deletes a worker; its heap entry goes stale (locked).
func (t *expiryTable) drop(w *workerClock) {
	delete(t.workers, w.id)
	delete(t.heardAgain, w.id)
	delete(t.pending, w.id)
	if !w.unheard {
		t.timed--
	}
	if w.unreachable {
		t.unreachable--
	}
}

// stillIdle re-checks, under the lock, that the worker is silent past
// removeAfter at now: one heard since the tick is not removed.
func (t *expiryTable) stillIdle(worker string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.workers[worker]
	return w != nil && len(w.expiring) == 0 && now.Sub(w.lastHeard) > t.removeAfter
}

// removed drops workers the state removed as idle. One that registers
// again is timed from its registration.
func (t *expiryTable) removed(workers []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range workers {
		if w := t.workers[id]; w != nil {
			t.drop(w)
		}
	}
}

// size is the number of workers timed for their leases and reachability
// (the holders of live leases and the workers heard this term); registered
// workers timed only for removal are not counted.
func (t *expiryTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.timed
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// check is a heap entry: look at worker id at time at.
type check struct {
	at time.Time
	id string
}

type checkHeap []check

func (h checkHeap) Len() int           { return len(h) }
func (h checkHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h checkHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *checkHeap) Push(x any)        { *h = append(*h, x.(check)) }
func (h *checkHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
