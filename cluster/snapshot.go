package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/fsm"
)

// SaveSnapshot writes the current state, read linearizably, to w: a backup
// an operator can restore into this or a new cluster.
func (n *Node) SaveSnapshot(ctx context.Context, w io.Writer) (int64, error) {
	if err := n.ReadBarrier(ctx); err != nil {
		return 0, err
	}
	snap := n.fsm.Snapshot()
	defer snap.Release()
	return snap.WriteTo(w)
}

// restoreClockSkew is how far after the restoring leader's clock a
// backup's time may be: a backup taken on a cluster whose leader's clock
// ran a little ahead is still restored, one that claims a later time is
// not (the state's time drives compaction, see fsm.RestorePlan).
const restoreClockSkew = time.Minute

// RestoreSnapshot makes a backup the cluster's state, on the leader. The
// backup is a file from outside the cluster, so nothing the cluster
// decides is taken from it: the restored state takes this cluster's Raft
// index, its token counter is raised above this cluster's counter and the
// backup's counter plus what its cluster can have granted since
// (fsm.GrantAllowance), so no token the old cluster granted after the
// backup, nor any this cluster granted, is granted again, and a backup that claims a time after this leader's
// clock (plus restoreClockSkew) or counters no cluster reaches is refused
// with ErrInvalidSnapshot. The snapshot is checked in full before Raft
// sees it: Raft cannot undo a restore that fails halfway. A refused
// restore changes nothing.
func (n *Node) RestoreSnapshot(ctx context.Context, r io.Reader) (fsm.Stats, error) {
	if _, err := n.established(); err != nil {
		return fsm.Stats{}, err
	}
	tmp, err := os.CreateTemp(n.cfg.DataDir, "restore-*.snap")
	if err != nil {
		return fsm.Stats{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	// The floor is above the counter of this cluster, whatever the
	// clocks say; PrepareRestore raises it above what the backup's cluster
	// can have granted since the backup (fsm.GrantAllowance), counting
	// from the later of this leader's clock and the state's own time: a
	// leader whose clock is behind (unset after a boot) does not shorten
	// the backup's age below what this cluster has already lived.
	live := n.fsm.Stats()
	floor := min(live.LastToken+1, fsm.MaxTokenFloor)
	plan := fsm.RestorePlan{
		// Raft installs the restore after its own last index, never after
		// the file's: a file cannot move the cluster's log (an index of
		// 2^64-1 would wrap it), and the state machine's indexes keep
		// growing from the cluster's.
		Index: n.raft.LastIndex(),
		Floor: floor,
		Now:   max(n.clock.Wall().UnixNano(), live.LastTime),
		// The state's own time is already this cluster's: a backup of it
		// taken after a leader with a fast clock is not refused.
		Latest: max(n.clock.Wall().Add(restoreClockSkew).UnixNano(), live.LastTime),
		// The backup's cluster may have fired schedule slots after the
		// backup: every slot until now counts as settled, so none fires
		// twice.
		Settled: max(n.clock.Wall().UnixNano(), live.LastTime),
	}
	restored, err := fsm.PrepareRestore(tmp, r, plan)
	if err != nil {
		return fsm.Stats{}, fmt.Errorf("%w: %w", ErrInvalidSnapshot, err)
	}
	// Every voter must read what Raft will send it: a backup holding jobs
	// that wait is written in snapshot version 5, which a voter below
	// level 5 cannot read. Versions up to 3 predate levels: every build
	// reads them.
	if v, err := fsm.SnapshotVersion(tmp); err != nil {
		return fsm.Stats{}, err
	} else if v > 3 {
		if err := n.requireLevel(ctx, v); err != nil {
			return fsm.Stats{}, err
		}
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return fsm.Stats{}, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fsm.Stats{}, err
	}
	// What Raft restores is read back and checked once more, as every
	// replica will read it.
	if _, err := fsm.InspectSnapshot(tmp); err != nil {
		return fsm.Stats{}, fmt.Errorf("%w: %w", ErrInvalidSnapshot, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fsm.Stats{}, err
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: plan.Index, Size: size}
	if err := n.raft.Restore(meta, tmp, n.cfg.ApplyTimeout); err != nil {
		return fsm.Stats{}, n.raftError(err)
	}
	// The restored leases start their clocks now, like at a takeover.
	if ls, err := n.established(); err == nil {
		workers, leases := n.restartClocks(ls)
		n.recordEvents(ctx, fsm.RecordEvent{Event: fsm.EventAbsenceRule,
			Detail: fmt.Sprintf("restore: clocks of %d leases of %d workers restarted", leases, workers)})
	}
	n.logger.Named("leader").Warn("snapshot_restored", "index", plan.Index, "token_floor", restored.LastToken)
	return n.fsm.Stats(), nil
}
