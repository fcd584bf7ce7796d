package cluster_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// needle is the id of a job submitted last, so its bytes mark where the
// log's newest entries are in raft.db.
const needle = "needle-7b1f04e9c2"

// restartDamaged runs a one-node cluster, with a Raft snapshot on disk
// when asked and entries after it, kills it, damages its data dir and
// returns what starting it again says.
func restartDamaged(t *testing.T, store string, snapshot bool, damage func(t *testing.T, dir string)) error {
	t.Helper()
	c := clustertest.New(t, 1, func(_ int, cfg *cluster.Config) { cfg.LogStore, cfg.WALSegmentBytes = store, 1<<20 })
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 10})
	for i := range 5 {
		do(t, c, &fsm.SubmitJob{Spec: spec(fmt.Sprintf("job-%d", i), fsm.LostRequeue)})
	}
	if snapshot {
		if err := c.Nodes[0].RaftSnapshot(); err != nil {
			t.Fatal(err)
		}
	}
	do(t, c, &fsm.SubmitJob{Spec: spec(needle, fsm.LostRequeue)})
	if store == cluster.LogStoreWAL {
		// More than a segment after the needle, so its record is in a
		// sealed segment: the WAL reads a damaged record at the tail as a
		// write torn by a crash and drops it (docs/operations.md).
		for i := range 80 {
			s := spec(fmt.Sprintf("pad-%d", i), fsm.LostRequeue)
			s.Payload = make([]byte, 16<<10)
			do(t, c, &fsm.SubmitJob{Spec: s})
		}
	}
	c.Kill(0)
	damage(t, c.Nodes[0].Dir)
	return c.TryStart(0)
}

// Every way of losing or damaging the log, the stable store or a snapshot
// is refused at start with one line that names the file, says what is
// wrong and points to the recovery procedure; never a panic, never a
// start with a lost term and vote.
func TestStartRefusesLostOrDamagedStorage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		snapshot bool
		damage   func(t *testing.T, dir string)
		want     []string
		store    string // default boltdb: these damage its pages
	}{
		{"wal deleted beside a snapshot", true, func(t *testing.T, dir string) {
			remove(t, filepath.Join(dir, "wal"))
		}, []string{"wal: is missing, but snapshot", "term and vote are lost"}, cluster.LogStoreWAL},
		{"wal emptied, no snapshot yet", false, func(t *testing.T, dir string) {
			entries, _ := os.ReadDir(filepath.Join(dir, "wal"))
			for _, e := range entries {
				remove(t, filepath.Join(dir, "wal", e.Name()))
			}
		}, []string{"wal: is empty", "raft.member says this node has been a cluster member"}, cluster.LogStoreWAL},
		{"a record in a sealed wal segment damaged", true, func(t *testing.T, dir string) {
			entries, _ := os.ReadDir(filepath.Join(dir, "wal"))
			hit := false
			for _, e := range entries {
				path := filepath.Join(dir, "wal", e.Name())
				b := read(t, path)
				for _, at := range indexAll(b, []byte(needle)) {
					b[at+3] ^= 0x20
					hit = true
				}
				write(t, path, b)
			}
			if !hit {
				t.Fatal("the newest entry is in no WAL segment")
			}
		}, []string{"wal: log entry", "checksum mismatch"}, cluster.LogStoreWAL},
		{"switched from boltdb to wal", false, func(t *testing.T, dir string) {}, []string{"raft.db: exists: this node keeps its log in boltdb"}, "switch"},
		{"raft.db deleted beside a snapshot", true, func(t *testing.T, dir string) {
			remove(t, filepath.Join(dir, "raft.db"))
		}, []string{"raft.db: is missing, but snapshot", "term and vote are lost"}, ""},
		{"raft.db deleted, no snapshot yet", false, func(t *testing.T, dir string) {
			remove(t, filepath.Join(dir, "raft.db"))
		}, []string{"raft.db: is missing", "raft.member says this node has been a cluster member"}, ""},
		{"raft.db emptied", true, func(t *testing.T, dir string) {
			truncate(t, filepath.Join(dir, "raft.db"), 0)
		}, []string{"raft.db: is empty, but snapshot"}, ""},
		{"raft.db truncated to half its pages", true, func(t *testing.T, dir string) {
			// bbolt's file runs past its pages; cut into the pages.
			path := filepath.Join(dir, "raft.db")
			var used int64
			db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			db.View(func(tx *bbolt.Tx) error { used = tx.Size(); return nil })
			db.Close()
			truncate(t, path, used/2)
		}, []string{"raft.db: truncated"}, ""},
		{"random bytes over the log's pages", true, func(t *testing.T, dir string) {
			path := filepath.Join(dir, "raft.db")
			b := read(t, path)
			rnd := rand.New(rand.NewPCG(1, 2))
			page := os.Getpagesize()
			for _, at := range indexAll(b, []byte(needle)) {
				start := at / page * page
				for i := start; i < start+page && i < len(b); i++ {
					b[i] = byte(rnd.Uint32())
				}
			}
			write(t, path, b)
		}, []string{"raft.db: "}, ""},
		{"one entry's command damaged", true, func(t *testing.T, dir string) {
			path := filepath.Join(dir, "raft.db")
			b := read(t, path)
			for _, at := range indexAll(b, []byte(needle)) {
				b[at+3] ^= 0x20 // "needle" becomes "neeDle": still valid text, not the entry written
			}
			write(t, path, b)
		}, []string{"raft.db: log entry", "checksum mismatch"}, ""},
		{"an entry deleted", false, func(t *testing.T, dir string) {
			editBolt(t, filepath.Join(dir, "raft.db"), func(tx *bbolt.Tx) error {
				c := tx.Bucket([]byte("logs")).Cursor()
				c.Last()
				c.Prev()
				return c.Delete()
			})
		}, []string{"raft.db: log entry", "is missing"}, ""},
		{"current term lost", true, func(t *testing.T, dir string) {
			editBolt(t, filepath.Join(dir, "raft.db"), func(tx *bbolt.Tx) error {
				return tx.Bucket([]byte("conf")).Delete([]byte("CurrentTerm"))
			})
		}, []string{"raft.db: holds no current term", "term and vote are lost"}, ""},
		{"meta.json damaged", true, func(t *testing.T, dir string) {
			path := filepath.Join(snapshotDir(t, dir), "meta.json")
			truncate(t, path, size(t, path)/2)
		}, []string{"meta.json: not a snapshot's metadata"}, ""},
		{"state.bin truncated", true, func(t *testing.T, dir string) {
			path := filepath.Join(snapshotDir(t, dir), "state.bin")
			truncate(t, path, size(t, path)-1)
		}, []string{"state.bin: ", "truncated or damaged"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			switch tc.store {
			case "":
				err = restartDamaged(t, cluster.LogStoreBoltDB, tc.snapshot, tc.damage)
			case "switch":
				err = restartSwitched(t)
			default:
				err = restartDamaged(t, tc.store, tc.snapshot, tc.damage)
			}
			if err == nil {
				t.Fatal("the node started")
			}
			msg := err.Error()
			t.Log(msg)
			if !errors.Is(err, cluster.ErrStorage) || strings.Contains(msg, "\n") ||
				!strings.HasPrefix(msg, "refusing to start: ") || !strings.Contains(msg, "docs/operations.md") {
				t.Fatalf("not one line naming the recovery procedure: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Fatalf("%q does not say %q", msg, w)
				}
			}
		})
	}
}

// restartSwitched runs a node on boltdb and starts it again on the WAL.
func restartSwitched(t *testing.T) error {
	t.Helper()
	store := cluster.LogStoreBoltDB
	c := clustertest.New(t, 1, func(_ int, cfg *cluster.Config) { cfg.LogStore = store })
	do(t, c, &fsm.SubmitJob{Spec: spec("switch", fsm.LostRequeue)})
	c.Kill(0)
	store = cluster.LogStoreWAL
	return c.TryStart(0)
}

// A data dir that was never part of a cluster starts, and one whose stores
// are whole restarts (the checks refuse only what is damaged), on either
// log store.
func TestStartAcceptsWholeStorage(t *testing.T) {
	for _, store := range []string{cluster.LogStoreWAL, cluster.LogStoreBoltDB} {
		if err := restartDamaged(t, store, true, func(*testing.T, string) {}); err != nil {
			t.Fatalf("%s: %v", store, err)
		}
	}
}

// The recovery procedure of docs/operations.md works: a node that lost its
// log is removed from a healthy member, starts from an empty data dir,
// joins as new and catches up.
func TestLostLogRecovery(t *testing.T) {
	c := clustertest.New(t, 3)
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 10})
	do(t, c, &fsm.SubmitJob{Spec: spec("before", fsm.LostRequeue)})
	lost := (c.Leader().Index + 1) % 3
	id := c.Nodes[lost].ID()
	// The leader answers once a majority has the entries; the follower
	// applies them later, and Raft refuses to snapshot an FSM that has
	// applied nothing yet (nothing new to snapshot).
	c.Converged()
	if err := c.Nodes[lost].RaftSnapshot(); err != nil {
		t.Fatal(err)
	}
	c.Kill(lost)
	// A Raft snapshot's state is a backup that snapshot inspect and
	// restore take, as docs/operations.md says.
	state, err := os.Open(filepath.Join(snapshotDir(t, c.Nodes[lost].Dir), "state.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	if _, err := fsm.InspectSnapshot(state); err != nil {
		t.Fatalf("state.bin is not a backup: %v", err)
	}
	remove(t, filepath.Join(c.Nodes[lost].Dir, "wal"))
	if err := c.TryStart(lost); !errors.Is(err, cluster.ErrStorage) {
		t.Fatalf("started without its log: %v", err)
	}

	// Move the data dir aside (here: empty it), remove the node, start it.
	entries, _ := os.ReadDir(c.Nodes[lost].Dir)
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(c.Nodes[lost].Dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Leader().RemoveNode(ctx(t), id, cluster.Actor{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	do(t, c, &fsm.SubmitJob{Spec: spec("during", fsm.LostRequeue)})
	c.Start(lost)
	c.WaitFor(15*time.Second, "the node to rejoin as a voter", func() bool {
		members, err := c.Leader().Members()
		return err == nil && len(members) == 3
	})
	c.Converged()
	for _, job := range []string{"before", "during"} {
		if _, err := c.Nodes[lost].FSM().Job(job); err != nil {
			t.Fatalf("rejoined node lacks %s: %v", job, err)
		}
	}
}

// A proposal damaged in the leader's memory (after it was encoded) never
// reaches a log: the leader's append refuses it, the proposer gets an
// error, nobody applies it, and the cluster goes on.
func TestDamagedProposalRefused(t *testing.T) {
	c := clustertest.New(t, 3)
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 10})
	entry, err := fsm.Encode(time.Now().UnixNano(), &fsm.SubmitJob{Spec: spec("damaged", fsm.LostRequeue)})
	if err != nil {
		t.Fatal(err)
	}
	entry[len(entry)/2] ^= 0x01
	if _, err := c.Leader().ApplyRaw(entry); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("a damaged proposal: %v", err)
	}
	do(t, c, &fsm.SubmitJob{Spec: spec("after", fsm.LostRequeue)})
	c.Converged()
	for _, n := range c.Nodes {
		if _, err := n.FSM().Job("damaged"); err == nil {
			t.Fatalf("node %d applied the damaged entry", n.Index)
		}
		if n.Err() != nil {
			t.Fatalf("node %d stopped: %v", n.Index, n.Err())
		}
	}
}

// An entry damaged on one node's disk after it was written stops that
// node, with a message naming the entry, when it reads the entry back
// (here: the leader, catching up a follower from entries no longer in its
// cache). The damage goes no further: the follower refuses the damaged
// copy, the others elect a leader with a good one, and converge.
func TestDiskDamageStopsOnlyThatNode(t *testing.T) {
	// Slow timings: the leader must stay the leader through hundreds of
	// writes with one follower down.
	c := clustertest.New(t, 3, clustertest.SlowRaft())
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 10})
	leader := c.Leader()
	behind := c.Nodes[(leader.Index+1)%3]
	c.Kill(behind.Index)
	rot := leader.Status().LastIndex + 1
	leader.Disk.Rot(rot)
	// More entries than the leader's log cache holds, so the entries the
	// follower needs are read back from disk, by the leader's replication
	// to it, which may start before the follower is back.
	var acked []string
	for i := 0; i < 600 && leader.Err() == nil; i++ {
		id := fmt.Sprintf("job-%03d", i)
		if _, err := leader.Apply(ctx(t), &fsm.SubmitJob{Spec: spec(id, fsm.LostRequeue)}); err != nil {
			if leader.Err() != nil {
				break
			}
			t.Fatal(err)
		}
		acked = append(acked, id)
	}
	c.Restart(behind.Index)
	select {
	case <-leader.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the leader did not stop on the damaged entry")
	}
	err := leader.Err()
	if !errors.Is(err, cluster.ErrStorage) || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), fmt.Sprintf("wal: log entry %d: corrupt encoding: checksum mismatch", rot)) {
		t.Fatalf("the leader stopped with %v", err)
	}
	if st := leader.Status(); st.Ready || !strings.Contains(st.NotReady, "stopped") {
		t.Fatalf("the stopped leader: %+v", st)
	}
	c.Kill(leader.Index)
	c.Converged()
	for _, n := range c.Running() {
		if n.Err() != nil {
			t.Fatalf("node %d stopped too: %v", n.Index, n.Err())
		}
		for _, id := range acked {
			if _, err := n.FSM().Job(id); err != nil {
				t.Fatalf("node %d lacks acknowledged %s: %v", n.Index, id, err)
			}
		}
	}
}

func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "meta.json"))
	if len(m) == 0 {
		t.Fatal("no snapshot on disk")
	}
	return filepath.Dir(m[0])
}

func indexAll(b, sub []byte) []int {
	var out []int
	for off := 0; ; {
		i := bytes.Index(b[off:], sub)
		if i < 0 {
			return out
		}
		out = append(out, off+i)
		off += i + 1
	}
}

func editBolt(t *testing.T, path string, fn func(*bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, path string, n int64) {
	t.Helper()
	if err := os.Truncate(path, n); err != nil {
		t.Fatal(err)
	}
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
