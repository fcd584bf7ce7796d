package cluster_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
)

// The fields of a snapshot's header record, in order (fsm/snapshot.go).
const (
	hdrIndex = iota
	hdrTime
	hdrToken
	hdrJobSeq
	hdrFinishSeq
	hdrEventSeq
	hdrWorkers
	hdrJobs
	hdrEvents
	hdrNodes
)

// withHeader returns the backup with one header field set to v and the
// checksum made right again: a crafted snapshot, as an attacker (or a
// broken tool) would write it.
func withHeader(t *testing.T, backup []byte, field int, v uint64) []byte {
	t.Helper()
	start := len("LEASEHOLD-SNAPSHOT") + 1
	if backup[start] != 1 {
		t.Fatal("the backup does not start with a header record")
	}
	n, k := binary.Uvarint(backup[start+1:])
	body := backup[start+1+k : start+1+k+int(n)]
	var vals []uint64
	for len(body) > 0 {
		x, k := binary.Uvarint(body)
		vals = append(vals, x)
		body = body[k:]
	}
	vals[field] = v
	var hdr []byte
	for _, x := range vals {
		hdr = binary.AppendUvarint(hdr, x)
	}
	out := append([]byte(nil), backup[:start]...)
	out = append(out, 1)
	out = binary.AppendUvarint(out, uint64(len(hdr)))
	out = append(out, hdr...)
	out = append(out, backup[start+1+k+int(n):]...)
	binary.LittleEndian.PutUint32(out[len(out)-4:], crc32.Checksum(out[:len(out)-4], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

// busyCluster has a worker, jobs in a few states, every node in the node
// table, and a backup of it all. Each step is retried while the young
// cluster still changes leaders.
func busyCluster(t *testing.T) (*clustertest.Cluster, []byte) {
	c := clustertest.New(t, 3)
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 10})
	for i := range 4 {
		do(t, c, &fsm.SubmitJob{Spec: spec(fmt.Sprintf("j%d", i), fsm.LostRequeue)})
	}
	var g fsm.Grant
	onLeader(t, c, func(n *clustertest.Node) error {
		res, err := n.Acquire(ctx(t), fsm.Acquire{WorkerID: "w", RequestID: "r1", Queues: []string{"default"}, Max: 1}, time.Second)
		if err == nil && len(res.Grants) == 1 {
			g = res.Grants[0]
		}
		return err
	})
	do(t, c, &fsm.Report{WorkerID: "w", JobID: g.Job.ID, Token: g.Lease.Token, ReportID: "rep", Outcome: fsm.OutcomeSucceeded})
	onLeader(t, c, func(n *clustertest.Node) error {
		_, err := n.Acquire(ctx(t), fsm.Acquire{WorkerID: "w", RequestID: "r2", Queues: []string{"default"}, Max: 1}, time.Second)
		return err
	})
	c.WaitFor(10*time.Second, "every node in the node table", func() bool { return len(c.Leader().FSM().Nodes()) == 3 })
	c.Converged()
	var backup bytes.Buffer
	onLeader(t, c, func(n *clustertest.Node) error {
		backup.Reset()
		_, err := n.SaveSnapshot(ctx(t), &backup)
		return err
	})
	return c, backup.Bytes()
}

// onLeader runs op on the current leader until it succeeds, retrying while
// leadership moves.
func onLeader(t testing.TB, c *clustertest.Cluster, op func(*clustertest.Node) error) {
	t.Helper()
	if err := retryOnLeader(c, op); err != nil {
		t.Fatal(err)
	}
}

// A crafted restore is refused with ErrInvalidSnapshot, and changes
// nothing: the state hash and the events stay, and writes go on.
func TestRestoreRefusesCraftedSnapshots(t *testing.T) {
	c, backup := busyCluster(t)
	leader := c.Leader()
	hash, events := leader.FSM().Hash(), leader.FSM().Stats().LastEventSeq
	future := uint64(time.Now().Add(10 * time.Minute).UnixNano())
	lies := map[string][]byte{
		"index 2^64-1":                     withHeader(t, backup, hdrIndex, math.MaxUint64),
		"index at the Raft cap":            withHeader(t, backup, hdrIndex, fsm.MaxIndex),
		"time in 2262":                     withHeader(t, backup, hdrTime, math.MaxInt64),
		"time ten minutes on":              withHeader(t, backup, hdrTime, future),
		"token counter at the floor bound": withHeader(t, backup, hdrToken, fsm.MaxTokenFloor),
		"token counter 2^64-1":             withHeader(t, backup, hdrToken, math.MaxUint64),
		"job seq 2^64-1":                   withHeader(t, backup, hdrJobSeq, math.MaxUint64),
		"finish seq 2^64-1":                withHeader(t, backup, hdrFinishSeq, math.MaxUint64),
		"event seq 2^64-1":                 withHeader(t, backup, hdrEventSeq, math.MaxUint64),
		"a job more than it holds":         withHeader(t, backup, hdrJobs, 5),
		"workers beyond the bound":         withHeader(t, backup, hdrWorkers, fsm.MaxWorkers+1),
	}
	for name, data := range lies {
		_, err := leader.RestoreSnapshot(ctx(t), bytes.NewReader(data))
		if !errors.Is(err, cluster.ErrInvalidSnapshot) {
			t.Errorf("%s: %v, want ErrInvalidSnapshot", name, err)
		}
	}
	if leader.FSM().Hash() != hash || leader.FSM().Stats().LastEventSeq != events {
		t.Fatal("a refused restore changed the state")
	}
	do(t, c, &fsm.SubmitJob{Spec: spec("after", fsm.LostRequeue)})
	c.Converged()
}

// A backup of a longer log, taken on a cluster whose leader's clock ran a
// little ahead, restores: the state takes this cluster's index (the file's
// is not the cluster's), its time is the file's, and the indexes keep
// growing from there on every node.
func TestRestoreTakesTheClusterIndex(t *testing.T) {
	c, backup := busyCluster(t)
	ahead := time.Now().Add(30 * time.Second)
	data := withHeader(t, withHeader(t, backup, hdrIndex, 1<<40), hdrTime, uint64(ahead.UnixNano()))
	leader := c.Leader()
	before := leader.Status().LastIndex
	st, err := leader.RestoreSnapshot(ctx(t), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if st.LastIndex < before || st.LastIndex >= 1<<40 || st.LastTime < ahead.UnixNano() {
		t.Fatalf("restored at index %d time %d; the cluster was at %d", st.LastIndex, st.LastTime, before)
	}
	leader = c.Leader()
	g := acquire(t, leader, "w", "r3")
	// The counter is raised above the backup's cluster's, by a second's
	// worth of grants, not to a time: a token stays exact as a JSON number.
	if g.Lease.Token <= st.LastToken-fsm.MaxGrantsPerSecond || g.Lease.Token >= 1<<53 {
		t.Fatalf("first token after the restore %d: want above the backup's counter and below 2^53", g.Lease.Token)
	}
	if g.Job.ModifyIndex <= st.LastIndex {
		t.Fatalf("grant after the restore at index %d, restore at %d", g.Job.ModifyIndex, st.LastIndex)
	}
	do(t, c, &fsm.Report{WorkerID: "w", JobID: g.Job.ID, Token: g.Lease.Token, ReportID: "rep3", Outcome: fsm.OutcomeSucceeded})
	c.Converged()
	for _, n := range c.Running() {
		if idx := n.Status().LastIndex; idx >= 1<<40 || n.FSM().LastIndex() <= st.LastIndex {
			t.Fatalf("node %d: raft index %d, state index %d", n.Index, idx, n.FSM().LastIndex())
		}
	}
}

// The state machine refuses a snapshot at the index the Raft guard refuses
// on the wire: one bound for both ways an index can arrive.
func TestIndexBoundsAgree(t *testing.T) {
	if uint64(fsm.MaxIndex) != transport.MaxRaftValue {
		t.Fatalf("fsm.MaxIndex %d, transport.MaxRaftValue %d", uint64(fsm.MaxIndex), transport.MaxRaftValue)
	}
}
