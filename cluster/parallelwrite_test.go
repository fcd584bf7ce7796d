package cluster_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// The leader sends a batch to its followers while it writes its own copy
// (third_party/raft/FORK.md), and nothing of the batch is applied or
// answered before the leader's own write has returned. With Raft's order
// (write, then send) the followers would not see the entry while the
// leader's write is held, and the wait below fails.
func TestLeaderReplicatesWhileItWrites(t *testing.T) {
	c := clustertest.New(t, 3)
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 10})
	leader := c.Leader()
	release := leader.Disk.HoldAppends()
	t.Cleanup(release)

	done := make(chan error, 1)
	go func() {
		_, err := leader.Apply(ctx(t), &fsm.SubmitJob{Spec: spec("held", fsm.LostRequeue)})
		done <- err
	}()
	var held uint64
	c.WaitFor(10*time.Second, "the leader's append held", func() bool {
		held = leader.Disk.Holding()
		return held > 0
	})
	for _, n := range c.Nodes {
		if n != leader {
			c.WaitFor(10*time.Second, "a follower to store the entry the leader is still writing", func() bool {
				return n.Disk.Stored() >= held
			})
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the write was answered (%v) before the leader's own copy was written", err)
	default:
	}
	for _, n := range c.Nodes {
		if _, err := n.FSM().Job("held"); err == nil {
			t.Fatalf("node %d applied the entry before the leader's own copy was written", n.Index)
		}
	}

	release()
	if err := <-done; err != nil {
		t.Fatalf("the held write: %v", err)
	}
	if _, err := leader.FSM().Job("held"); err != nil {
		t.Fatalf("the held write is not applied on the leader: %v", err)
	}
	c.Converged()
}

// A staged batch stays readable until it is stored, whatever the cache's
// ring does meanwhile (a compaction's DeleteRange empties it). Dropped
// after a failed write, its entries read ErrLogWriteFailed, never "not
// found" (which would make a replicator send a snapshot), until a batch is
// staged or stored.
func TestLogCacheStaging(t *testing.T) {
	store := raft.NewInmemStore()
	cache, err := raft.NewLogCache(4, store)
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.StoreLogs([]*raft.Log{{Index: 1, Data: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	batch := make([]*raft.Log, 6) // more than the ring holds
	for i := range batch {
		batch[i] = &raft.Log{Index: uint64(2 + i), Data: []byte{byte('b' + i)}}
	}
	if !cache.StageLogs(batch) {
		t.Fatal("a consecutive batch was not staged")
	}
	if err := cache.DeleteRange(1, 1); err != nil {
		t.Fatal(err)
	}
	for _, want := range batch {
		var got raft.Log
		if err := cache.GetLog(want.Index, &got); err != nil || string(got.Data) != string(want.Data) {
			t.Fatalf("staged entry %d: %q, %v", want.Index, got.Data, err)
		}
	}
	cache.UnstageLogs()
	var got raft.Log
	for _, l := range batch {
		if err := cache.GetLog(l.Index, &got); !errors.Is(err, raft.ErrLogWriteFailed) {
			t.Fatalf("entry %d of a dropped batch: %q, %v", l.Index, got.Data, err)
		}
	}
	if err := cache.DeleteRange(1, 1); err != nil {
		t.Fatal(err)
	}
	if err := cache.GetLog(7, &got); !errors.Is(err, raft.ErrLogWriteFailed) {
		t.Fatalf("a dropped entry after a truncation: %q, %v", got.Data, err)
	}
	if cache.StageLogs([]*raft.Log{{Index: 2}, {Index: 4}}) {
		t.Fatal("a batch with a gap was staged")
	}
	if err := cache.StoreLogs([]*raft.Log{{Index: 2, Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := cache.GetLog(3, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("an entry never stored, after a store: %q, %v", got.Data, err)
	}
	if err := cache.DeleteRange(2, 2); err != nil {
		t.Fatal(err)
	}

	// Stored, the batch reads back from the store once it leaves the ring.
	if !cache.StageLogs(batch) {
		t.Fatal("not staged")
	}
	if err := cache.StoreLogs(batch); err != nil {
		t.Fatal(err)
	}
	for _, want := range batch {
		if err := cache.GetLog(want.Index, &got); err != nil || string(got.Data) != string(want.Data) {
			t.Fatalf("stored entry %d: %q, %v", want.Index, got.Data, err)
		}
	}
}
