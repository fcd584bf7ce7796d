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
	return n.fsm.Snapshot().WriteTo(w)
}

// RestoreSnapshot makes a backup the cluster's state, on the leader. The
// backup's token counter is raised above this cluster's counter and the
// time floor of this moment (fsm.TokenFloorFor), so no token the old
// cluster granted after the backup, nor any this cluster granted, is
// granted again. The snapshot is checked in full before Raft sees it:
// Raft cannot undo a restore that fails halfway.
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
	// The floor is above the counter of this cluster, the time floor of
	// this leader's clock, and the time floor of the state's own clock: a
	// leader whose clock is wrong (fast once, right later; unset after a
	// boot) cannot make tokens go backwards.
	live := n.fsm.Stats()
	floor := max(fsm.TokenFloorFor(n.clock.Wall().Unix()), fsm.TokenFloorFor(live.LastTime/int64(time.Second)),
		min(live.LastToken+1, fsm.MaxTokenFloor))
	if err := fsm.RaiseSnapshotFloor(tmp, r, floor); err != nil {
		return fsm.Stats{}, fmt.Errorf("%w: %w", ErrInvalidSnapshot, err)
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return fsm.Stats{}, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fsm.Stats{}, err
	}
	stats, err := fsm.InspectSnapshot(tmp)
	if err != nil {
		return fsm.Stats{}, fmt.Errorf("%w: %w", ErrInvalidSnapshot, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fsm.Stats{}, err
	}
	// Raft continues its log after max(its index, the snapshot's), so the
	// state machine's indexes stay increasing.
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: stats.LastIndex, Size: size}
	if err := n.raft.Restore(meta, tmp, n.cfg.ApplyTimeout); err != nil {
		return fsm.Stats{}, n.raftError(err)
	}
	// The restored leases start their clocks now, like at a takeover.
	if ls, err := n.established(); err == nil {
		workers, leases := n.restartClocks(ls)
		n.recordEvents(ctx, fsm.RecordEvent{Event: fsm.EventAbsenceRule,
			Detail: fmt.Sprintf("restore: clocks of %d leases of %d workers restarted", leases, workers)})
	}
	n.logger.Named("leader").Warn("snapshot_restored", "jobs_index", stats.LastIndex, "token_floor", floor)
	return n.fsm.Stats(), nil
}
