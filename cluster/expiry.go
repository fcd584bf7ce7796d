package cluster

import (
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
type expiryTable struct {
	mu sync.Mutex
	expiryTimings
	workers  map[string]*workerClock
	lastTick time.Time
}

// expiryTimings are the silences the table acts on.
type expiryTimings struct {
	grace       time.Duration // unreachable
	toleration  time.Duration // leases expire
	removeAfter time.Duration // a registered worker holding nothing is removed
}

type workerClock struct {
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
}

// newExpiryTable starts every worker afresh at takeover: a new leader never
// charges a worker for a silence it did not witness. holders hold live
// leases; idle are the other registered workers.
func newExpiryTable(timings expiryTimings, takeover time.Time, holders, idle []string) *expiryTable {
	t := &expiryTable{expiryTimings: timings, workers: map[string]*workerClock{}, lastTick: takeover}
	for _, w := range idle {
		t.workers[w] = &workerClock{lastHeard: takeover, unheard: true}
	}
	for _, w := range holders {
		t.workers[w] = &workerClock{lastHeard: takeover}
	}
	return t
}

// heard records a request from the worker that arrived at `at`, and returns
// the tokens whose expiry is already decided.
func (t *expiryTable) heard(worker string, at time.Time) map[uint64]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.workers[worker]
	if w == nil {
		w = &workerClock{lastHeard: at}
		t.workers[worker] = w
	}
	w.unheard = false
	if at.After(w.lastHeard) {
		w.lastHeard = at
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
			t.workers[id] = &workerClock{lastHeard: now}
		case w.unheard:
			// A holder is timed for its leases from now on.
			w.unheard, w.lastHeard = false, now
		}
	}
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
	out := map[string][]uint64{}
	for id, w := range t.workers {
		for tok := range w.expiring {
			out[id] = append(out[id], tok)
		}
	}
	for _, toks := range out {
		slices.Sort(toks)
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
}

// tick applies the absence rule and reports the workers whose state
// changed. A gap longer than grace between two ticks means this leader was
// not watching (paused, starved, the machine asleep): every lastHeard moves
// forward by the gap, so nothing comes due because of it.
func (t *expiryTable) tick(now time.Time) tickResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	var res tickResult
	if gap := now.Sub(t.lastTick); absenceRule && gap > t.grace {
		res.gap = gap
		for _, w := range t.workers {
			// A request handled after the gap already restarted its clock:
			// never beyond now, which is a full toleration from here.
			w.lastHeard = minTime(w.lastHeard.Add(gap), now)
		}
	}
	if now.After(t.lastTick) {
		t.lastTick = now
	}
	for id, w := range t.workers {
		silent := now.Sub(w.lastHeard)
		if silent > t.removeAfter {
			res.idle = append(res.idle, id)
		}
		if w.unheard {
			continue
		}
		switch {
		case silent > t.grace && !w.unreachable:
			w.unreachable = true
			res.unreachable = append(res.unreachable, id)
		case silent <= t.grace && w.unreachable:
			w.unreachable = false
			res.reachable = append(res.reachable, id)
		}
		if silent > t.toleration {
			res.overdue = append(res.overdue, id)
		}
	}
	slices.Sort(res.unreachable)
	slices.Sort(res.reachable)
	slices.Sort(res.overdue)
	slices.Sort(res.idle)
	return res
}

// silentPastGrace counts the workers timed for their leases and
// reachability, and how many of them are silent past grace at now.
func (t *expiryTable) silentPastGrace(now time.Time) (timed, silent int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.workers {
		if w.unheard {
			continue
		}
		timed++
		if now.Sub(w.lastHeard) > t.grace {
			silent++
		}
	}
	return timed, silent
}

// shift moves every lastHeard forward by d, never beyond now: the leader
// does not charge workers for a silence it chose not to act on.
func (t *expiryTable) shift(d time.Duration, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.workers {
		w.lastHeard = minTime(w.lastHeard.Add(d), now)
	}
}

// markExpiring decides the expiry of a worker's tokens if, checked again
// under the lock, the worker is still silent past toleration. After it
// returns true, heartbeats answer those tokens lost.
func (t *expiryTable) markExpiring(worker string, tokens []uint64, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.workers[worker]
	if w == nil || now.Sub(w.lastHeard) <= t.toleration {
		return false
	}
	if w.expiring == nil {
		w.expiring = map[uint64]bool{}
	}
	for _, tok := range tokens {
		w.expiring[tok] = true
	}
	return true
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
	delete(t.workers, worker)
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
	for _, w := range workers {
		delete(t.workers, w)
	}
}

// size is the number of workers timed for their leases and reachability
// (the holders of live leases and the workers heard this term); registered
// workers timed only for removal are not counted.
func (t *expiryTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, w := range t.workers {
		if !w.unheard {
			n++
		}
	}
	return n
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
