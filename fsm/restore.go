package fsm

import (
	"fmt"
	"io"
	"time"
)

// RestorePlan is what the cluster a backup is restored into decides about
// it. A backup is a file from outside the cluster: everything the cluster
// can decide for itself it takes from here, not from the file, and the
// rest of the file must agree with it.
type RestorePlan struct {
	// Index is the raft index the restored state takes: the cluster's
	// last log index. Raft installs the restore after it, so the state
	// machine's indexes keep growing. Jobs and events of the backup that
	// carry a later index (a backup of a longer log) are given this one.
	Index uint64
	// Floor is the token counter's least value after the restore: above
	// anything this cluster granted (its counter plus one). PrepareRestore
	// raises it further above what the backup's cluster may have granted
	// after the backup was taken (GrantAllowance).
	Floor uint64
	// Now is the restoring cluster's time, unix nanoseconds: how long ago
	// the backup was taken is Now less the backup's own time.
	Now int64
	// Latest is the latest time, unix nanoseconds, the backup may carry:
	// the restoring leader's clock plus an allowance for skew. A state's
	// time drives compaction, so a backup from the future would compact
	// jobs and events before their retention ends.
	Latest int64
	// Settled is the time, unix nanoseconds, through which every
	// schedule's slots count as settled after the restore (the restoring
	// leader's clock): the backup's cluster may have fired slots after
	// the backup was taken, and a slot must fire at most once.
	Settled int64
}

// PrepareRestore reads a backup in full and writes to dst the snapshot a
// cluster installs in its place. The backup is decoded and checked like
// any restore (records, counts, invariants), then against plan: a backup
// whose time is after plan.Latest, or whose token counter is at or above
// MaxTokenFloor (no floor could then be raised above it), is refused with
// an ErrInvalidArgument FieldError naming the field. The copy takes
// plan.Index as its index, carries no index after it, has its token
// counter raised to at least plan.Floor and GrantAllowance and ends with a
// tokens.floor_raised event, and its schedules' slots settled through
// plan.Settled (which then becomes the copy's time, if later: no time in a
// state is after its own). It is written in the newest snapshot version.
// PrepareRestore returns the copy's counters; it touches no live state.
func PrepareRestore(dst io.Writer, src io.Reader, plan RestorePlan) (Stats, error) {
	if plan.Floor > MaxTokenFloor {
		return Stats{}, invalid("floor", "%d exceeds %d", plan.Floor, uint64(MaxTokenFloor))
	}
	if plan.Index >= MaxIndex {
		return Stats{}, invalid("index", "%d is beyond any cluster's (%d)", plan.Index, uint64(MaxIndex))
	}
	s, err := readState(src)
	if err != nil {
		return Stats{}, err
	}
	if s.lastTime > plan.Latest {
		return Stats{}, invalid("last_time", "the snapshot's time %s is after this cluster's clock allows (%s)",
			formatTime(s.lastTime), formatTime(plan.Latest))
	}
	if s.lastToken >= MaxTokenFloor {
		return Stats{}, invalid("last_token", "the snapshot's token counter %d is at or above %d: no floor can be raised above it",
			s.lastToken, uint64(MaxTokenFloor))
	}
	s.rebase(plan.Index)
	old, backupTime := s.lastToken, s.lastTime
	for name, sc := range s.schedules {
		if sc.LastSlot < plan.Settled {
			c := *sc
			c.LastSlot = plan.Settled
			s.schedules[name] = &c
			// The state's time bounds every time in it, a schedule's
			// LastSlot too (check): settling slots through a time makes
			// it the state's.
			s.lastTime = max(s.lastTime, plan.Settled)
		}
	}
	s.lastToken = max(old, plan.Floor, GrantAllowance(old, backupTime, plan.Now))
	s.emit(Event{Type: EventTokenFloorRaised, Detail: fmt.Sprintf("restore: from %d to %d", old, s.lastToken)})
	if err := s.check(); err != nil {
		return Stats{}, fmt.Errorf("%w: restored state: %w", ErrCorrupt, err)
	}
	f := &FSM{st: s}
	snap := f.Snapshot()
	defer snap.Release()
	if _, err := snap.WriteTo(dst); err != nil {
		return Stats{}, err
	}
	return f.Stats(), nil
}

// rebase makes index the state's raft index and moves every later index of
// a job or event down to it. Only a fresh state, not yet shared with a
// snapshot or a reader, may be rebased: it edits in place.
func (s *state) rebase(index uint64) {
	eachJob(s.shards, func(j *Job) bool {
		j.CreateIndex, j.ModifyIndex = min(j.CreateIndex, index), min(j.ModifyIndex, index)
		return true
	})
	for i := range s.events.len() {
		ev := s.events.at(i)
		ev.Index = min(ev.Index, index)
	}
	s.lastIndex = index
}

func formatTime(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339) }

// MaxGrantsPerSecond is the bound a restore assumes on the tokens a
// cluster grants per second (a token per lease): 2^20, far above any rate
// docs/performance.md measured. A restore raises the counter by this
// much per second since the backup was taken, so tokens stay far below
// 2^53, the largest integer a JSON number (a float64) holds exactly:
// 2^53 / 2^20 is 272 years of backups' age.
const MaxGrantsPerSecond = 1 << 20

// GrantAllowance is the least token counter a backup taken at backupTime
// with counter backupToken may restore to at now: above every token its
// cluster can have granted since, at MaxGrantsPerSecond for every second
// begun (at least one), saturating at MaxTokenFloor. A backup whose time
// is after now is allowed one second.
func GrantAllowance(backupToken uint64, backupTime, now int64) uint64 {
	secs := uint64(1)
	if now > backupTime {
		d := uint64(now) - uint64(backupTime) // exact: the difference is below 2^64
		secs = max(1, d/uint64(time.Second)+min(1, d%uint64(time.Second)))
	}
	if backupToken >= MaxTokenFloor || secs >= (MaxTokenFloor-backupToken)/MaxGrantsPerSecond {
		return MaxTokenFloor
	}
	return backupToken + secs*MaxGrantsPerSecond
}
