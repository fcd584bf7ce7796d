package cluster

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// diskState says whether the node's data dir has room. A write to the log,
// the stable store or a snapshot that fails for lack of space (ENOSPC, or
// EDQUOT for a quota) sets it; a later write that succeeds clears it. While
// it is set the node is not ready and refuses writes with a *DiskFullError,
// so clients and load balancers go to a node that can log them.
//
// Writes have a weight. Heavy ones (log appends, snapshots) need new room;
// light ones (the term, a vote, a log compaction) rewrite a few bytes, which
// bbolt can often place in pages it already has on a disk that is full. So
// a light write that succeeds clears only a light failure: a failed append
// is cleared by an append that succeeds.
//
// Only a write that reached the disk clears it, never a free-space poll:
// free blocks say nothing of a quota, of reserved blocks or of whether
// bbolt can grow its file, and the writes come anyway. A follower's failed
// append is retried by the leader (with a backoff of at most about ten
// seconds) until it succeeds; a leader steps down at its first failed
// append, and one that is elected again appends at once.
type diskState struct {
	nodeID string
	logger hclog.Logger

	full  atomic.Bool // the fast path of every successful write reads only this
	mu    sync.Mutex
	cause error // the failed write's error while full
	heavy bool  // the failed write was heavy
	since time.Time
}

// wrote records the outcome of a write and returns its error, a
// *DiskFullError when it failed for lack of space.
func (d *diskState) wrote(err error, heavy bool) error {
	if err == nil {
		if d.full.Load() {
			d.clear(heavy)
		}
		return nil
	}
	return d.failed(err, heavy)
}

// failed records a write that failed; a write whose success proves nothing
// (a buffered snapshot write) reports only its failures.
func (d *diskState) failed(err error, heavy bool) error {
	if !noSpace(err) {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cause == nil {
		d.since = time.Now()
		d.logger.Error("disk_full", "error", err,
			"effect", "not ready; writes through this node are refused with DISK_FULL until a write succeeds again")
	}
	if d.cause == nil || heavy || !d.heavy {
		d.cause, d.heavy = err, heavy
	}
	d.full.Store(true)
	return &DiskFullError{NodeID: d.nodeID, Err: err}
}

func (d *diskState) clear(heavy bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cause == nil || d.heavy && !heavy {
		return
	}
	d.logger.Info("disk_writable", "full_for", time.Since(d.since).Round(time.Millisecond))
	d.cause = nil
	d.full.Store(false)
}

// err is a *DiskFullError while the disk is full, nil otherwise.
func (d *diskState) err() error {
	if !d.full.Load() {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cause == nil {
		return nil
	}
	return &DiskFullError{NodeID: d.nodeID, Err: d.cause}
}

// noSpace reports whether a write failed for lack of space or quota.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
