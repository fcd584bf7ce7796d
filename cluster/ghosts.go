package cluster

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// ghosts keep Raft's view of its log true when an append fails right after
// a truncation.
//
// A follower told by a new leader that its last entries conflict deletes
// them (DeleteRange) and then appends the leader's (StoreLogs). If that
// append fails (a full disk), hashicorp/raft returns without moving its
// idea of the last index back: it still believes the deleted entries are
// there, asks the store for them at every later append, is told they are
// not found, and never catches up until restarted. So the log store keeps
// what a deletion of the log's tail removes (cut) until the next append.
// If that append fails, the cut entries become ghosts: the log Raft
// believes in, read back from memory as if never deleted, until an append
// succeeds:
//
//   - Raft finds the conflict again and deletes them again (they leave the
//     ghosts; a failed append after that deletion brings them back), then
//     appends the leader's entries once the disk takes writes.
//   - Or a later leader's log matches them, and Raft appends after them:
//     they are written first, in the same batch, so the node never holds
//     an entry past a gap. A follower may acknowledge matching ghosts in an
//     append that carries nothing new: hashicorp/raft commits entries of
//     earlier terms only through an entry of the leader's own term, and
//     that entry's append writes the ghosts first.
//   - Or Raft moves past them (a snapshot installed over them, a deletion
//     of the whole log): an append that does not start right after them,
//     or a deletion that covers them, drops them.
//
// A restart forgets them and Raft starts from the store, which then holds
// exactly what Raft asked for (the deletion happened); an entry only a
// ghost held was never counted toward a commit.
type ghosts struct {
	mu  sync.Mutex
	cut []*raft.Log // the last tail deletion's entries, until the next append
	run []*raft.Log // the ghosts: consecutive, right after the store's last entry
	// any is len(run) > 0, and gen counts changes of run: a read that missed
	// in the store looks at the ghosts (and the store again) only then.
	any atomic.Bool
	gen atomic.Uint64
}

// Bounds on what a tail deletion keeps: a conflicting tail is a leader's
// uncommitted entries, far less. A larger one is deleted unkept.
const (
	maxCutEntries = 65536
	maxCutBytes   = 64 << 20
)

func (g *ghosts) setRun(run []*raft.Log) {
	g.run = run
	g.any.Store(len(run) > 0)
	g.gen.Add(1)
}

// mayHave reports whether a read that missed in the store, begun when gen
// was seen, should look at the ghosts.
func (g *ghosts) mayHave(seen uint64) bool { return g.any.Load() || g.gen.Load() != seen }

// read copies the ghost at index into l.
func (g *ghosts) read(index uint64, l *raft.Log) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.run {
		if e.Index == index {
			*l = *e
			return true
		}
	}
	return false
}

// last is the last ghost's index, or 0.
func (g *ghosts) last() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastLocked()
}

func (g *ghosts) lastLocked() uint64 {
	if n := len(g.run); n > 0 {
		return g.run[n-1].Index
	}
	return 0
}

// before returns the batch an append of logs writes, with mu held: the
// ghosts first when logs follow right after them and they right after
// storeLast; otherwise Raft has moved past them, and they are dropped.
func (g *ghosts) before(logs []*raft.Log, storeLast uint64) []*raft.Log {
	if len(g.run) == 0 || len(logs) == 0 {
		return logs
	}
	if logs[0].Index == g.lastLocked()+1 && g.run[0].Index == storeLast+1 {
		return append(slices.Clone(g.run), logs...)
	}
	g.setRun(nil)
	return logs
}

// stored settles an append, with mu held: one that succeeded leaves no
// ghost (Raft's log is the store's); one that failed right after a tail
// deletion leaves what it deleted as ghosts, after those below it.
func (g *ghosts) stored(ok bool, storeLast uint64) {
	cut := g.cut
	g.cut = nil
	switch {
	case ok:
		if len(g.run) > 0 {
			g.setRun(nil)
		}
	case len(cut) > 0:
		run := append(slices.Clone(g.run), cut...)
		if !consecutiveFrom(run, storeLast+1) {
			run = nil // cannot stand for Raft's log: keep nothing
		}
		g.setRun(run)
	}
}

// cutting returns what a deletion of [lo, hi] removes when it is a tail
// deletion of the log Raft believes in (store and ghosts), with mu held;
// nil for any other (a prefix, the whole log) or one too large to keep.
func (g *ghosts) cutting(store raft.LogStore, first, last, lo, hi uint64) []*raft.Log {
	if lo <= first || hi < max(last, g.lastLocked()) {
		return nil
	}
	var out []*raft.Log
	size := 0
	for i := lo; i <= last; i++ {
		var l raft.Log
		if store.GetLog(i, &l) != nil {
			return nil
		}
		size += len(l.Data)
		if len(out) >= maxCutEntries || size > maxCutBytes {
			return nil
		}
		out = append(out, &l)
	}
	for _, e := range g.run {
		if e.Index >= lo && e.Index <= hi {
			out = append(out, e)
		}
	}
	return out
}

// deleted records a deletion of [lo, hi] that removed cut, with mu held.
func (g *ghosts) deleted(lo, hi uint64, cut []*raft.Log) {
	if len(g.run) > 0 {
		g.setRun(slices.DeleteFunc(slices.Clone(g.run), func(e *raft.Log) bool { return e.Index >= lo && e.Index <= hi }))
	}
	g.cut = cut
}

// consecutiveFrom reports whether run's indexes are from, from+1, ...
func consecutiveFrom(run []*raft.Log, from uint64) bool {
	for i, e := range run {
		if e.Index != from+uint64(i) {
			return false
		}
	}
	return true
}
