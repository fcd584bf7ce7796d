// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"errors"
	"fmt"
	"sync"
)

// LogCache wraps any LogStore implementation to provide an
// in-memory ring buffer. This is used to cache access to
// the recently written entries. For implementations that do not
// cache themselves, this can provide a substantial boost by
// avoiding disk I/O on recent entries.
type LogCache struct {
	store LogStore

	cache []*Log
	l     sync.RWMutex

	// staged is the leader's batch being written, readable before
	// StoreLogs returns (StageLogs). It is kept apart from cache, which
	// DeleteRange empties, so a staged entry stays readable until stored.
	// leasehold's change.
	staged []*Log
	// failedLo and failedHi bound a batch dropped after its write failed
	// (UnstageLogs): a replicator told of it must not take it for a
	// compacted entry (ErrLogNotFound sends a snapshot), so it reads
	// ErrLogWriteFailed until a batch is staged or stored: entries reach
	// the store only through StoreLogs. leasehold's change.
	failedLo, failedHi uint64
}

// ErrLogWriteFailed is returned by LogCache.GetLog for an entry a leader
// staged and then failed to write. leasehold's change.
var ErrLogWriteFailed = errors.New("log entry's write failed on this node")

// NewLogCache is used to create a new LogCache with the
// given capacity and backend store.
func NewLogCache(capacity int, store LogStore) (*LogCache, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("capacity must be positive")
	}
	c := &LogCache{
		store: store,
		cache: make([]*Log, capacity),
	}
	return c, nil
}

// IsMonotonic implements the MonotonicLogStore interface. This is a shim to
// expose the underlying store as monotonically indexed or not.
func (c *LogCache) IsMonotonic() bool {
	if store, ok := c.store.(MonotonicLogStore); ok {
		return store.IsMonotonic()
	}

	return false
}

func (c *LogCache) GetLog(idx uint64, log *Log) error {
	// Check the buffer for an entry
	c.l.RLock()
	cached := c.cache[idx%uint64(len(c.cache))]
	if n := len(c.staged); n > 0 && idx >= c.staged[0].Index && idx <= c.staged[n-1].Index {
		cached = c.staged[idx-c.staged[0].Index]
	}
	failed := c.failedHi != 0 && idx >= c.failedLo && idx <= c.failedHi
	c.l.RUnlock()
	if failed {
		return ErrLogWriteFailed
	}

	// Check if entry is valid
	if cached != nil && cached.Index == idx {
		*log = *cached
		return nil
	}

	// Forward request on cache miss
	return c.store.GetLog(idx, log)
}

func (c *LogCache) StoreLog(log *Log) error {
	return c.StoreLogs([]*Log{log})
}

func (c *LogCache) StoreLogs(logs []*Log) error {
	err := c.store.StoreLogs(logs)
	// Insert the logs into the ring buffer, but only on success
	if err != nil {
		return fmt.Errorf("unable to store logs within log store, err: %q", err)
	}
	c.l.Lock()
	for _, l := range logs {
		c.cache[l.Index%uint64(len(c.cache))] = l
	}
	c.staged = nil
	c.failedLo, c.failedHi = 0, 0
	c.l.Unlock()
	return nil
}

// StageLogs makes a leader's batch readable through GetLog before
// StoreLogs has written it, so the leader can send the entries to its
// followers while it writes its own copy (leasehold's change, see
// FORK.md). The batch's indexes must be consecutive. It stays staged until
// StoreLogs stores it or UnstageLogs drops it after a failed write.
func (c *LogCache) StageLogs(logs []*Log) bool {
	for i := 1; i < len(logs); i++ {
		if logs[i].Index != logs[0].Index+uint64(i) {
			return false
		}
	}
	if len(logs) == 0 {
		return false
	}
	c.l.Lock()
	c.staged = logs
	c.failedLo, c.failedHi = 0, 0
	c.l.Unlock()
	return true
}

// UnstageLogs drops a staged batch whose write failed. Until a batch is
// staged or stored, GetLog answers its indexes ErrLogWriteFailed: a
// replicator that was told of the batch stops sending instead of taking
// the entries for compacted ones.
func (c *LogCache) UnstageLogs() {
	c.l.Lock()
	if n := len(c.staged); n > 0 {
		c.failedLo, c.failedHi = c.staged[0].Index, c.staged[n-1].Index
	}
	c.staged = nil
	c.l.Unlock()
}

func (c *LogCache) FirstIndex() (uint64, error) {
	return c.store.FirstIndex()
}

func (c *LogCache) LastIndex() (uint64, error) {
	return c.store.LastIndex()
}

func (c *LogCache) DeleteRange(min, max uint64) error {
	// Invalidate the cache on deletes
	c.l.Lock()
	c.cache = make([]*Log, len(c.cache))
	c.l.Unlock()

	return c.store.DeleteRange(min, max)
}
