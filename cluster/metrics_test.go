package cluster_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// The expiry ticks look at a worker when its check comes due, about once
// per grace, however many ticks run meanwhile: the counter grows with the
// workers, not with workers times ticks.
func TestMetricsExpiryLooksGrowWithWhatIsDue(t *testing.T) {
	const workers = 40
	c := clustertest.New(t, 1)
	leader := c.Leader()
	for i := range workers {
		do(t, c, &fsm.RegisterWorker{WorkerID: fmt.Sprintf("w%d", i), Capacity: 1})
	}
	before := leader.Metrics().ExpiryWorkersLooked
	tick := c.Tick(leader.Index)
	ticks := 0
	for d := tick; d <= 2*clustertest.Grace; d += tick {
		for i := range workers {
			heartbeat(t, leader, fmt.Sprintf("w%d", i))
		}
		c.Step(leader.Index, tick)
		ticks++
	}
	looked := leader.Metrics().ExpiryWorkersLooked - before
	// Each worker's first check comes a grace after it was first heard and
	// finds it heard since; a second may come by the end of two graces.
	t.Logf("%d looks at %d workers over %d ticks", looked, workers, ticks)
	if looked < workers || looked > 3*workers {
		t.Fatalf("%d looks at %d workers over %d ticks (two graces): want about one per worker per grace", looked, workers, ticks)
	}
}

// A Raft snapshot is logged once on disk, and its size and write time are
// the node's metrics; the size is that of the file Raft keeps.
func TestMetricsLastSnapshot(t *testing.T) {
	var logs syncBuffer
	c := clustertest.New(t, 1, func(_ int, cfg *cluster.Config) {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	})
	n := c.Nodes[0]
	if m := n.Metrics(); m.SnapshotLastBytes != 0 || m.SnapshotLastDuration != 0 {
		t.Fatalf("a snapshot before any: %d bytes, %v", m.SnapshotLastBytes, m.SnapshotLastDuration)
	}
	for i := range 20 {
		do(t, c, &fsm.SubmitJob{Spec: spec(fmt.Sprintf("job-%d", i), fsm.LostRequeue)})
	}
	if err := n.RaftSnapshot(); err != nil {
		t.Fatal(err)
	}
	m := n.Metrics()
	files, err := filepath.Glob(filepath.Join(n.Dir, "snapshots", "*", "state.bin"))
	if err != nil || len(files) != 1 {
		t.Fatalf("snapshot files %v, %v", files, err)
	}
	fi, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if m.SnapshotLastBytes != fi.Size() || m.SnapshotLastDuration <= 0 {
		t.Fatalf("last snapshot %d bytes in %v; the file has %d", m.SnapshotLastBytes, m.SnapshotLastDuration, fi.Size())
	}
	if want := fmt.Sprintf("bytes=%d", fi.Size()); !strings.Contains(logs.String(), "snapshot_persisted") || !strings.Contains(logs.String(), want) {
		t.Fatalf("no snapshot_persisted line with %s in the log:\n%s", want, logs.String())
	}
}

// syncBuffer is a log sink the node's goroutines may write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The histograms labelled by queue name the first 100 queues the node
// observed and put every later one under queue="(other)": client-chosen
// queue names cannot grow /metrics without bound.
func TestMetricsQueueLabelsBounded(t *testing.T) {
	const queues = 130
	c := clustertest.New(t, 1)
	n := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1000})
	for i := range queues {
		q := fmt.Sprintf("tenant-%04d", i)
		do(t, c, &fsm.SubmitJob{Spec: fsm.JobSpec{ID: "j" + q, Queue: q, Kind: "k", MaxAttempts: 1, MaxWorkerLosses: 3, OnWorkerLost: fsm.LostRequeue}})
		res, err := n.Acquire(ctx(t), fsm.Acquire{WorkerID: "w", RequestID: "r" + q, Queues: []string{q}, Max: 1}, time.Second)
		if err != nil || len(res.Grants) != 1 {
			t.Fatalf("acquire from %s: %+v %v", q, res, err)
		}
		g := res.Grants[0]
		do(t, c, &fsm.Report{WorkerID: "w", JobID: g.Job.ID, Token: g.Lease.Token, ReportID: "rep" + q, Outcome: fsm.OutcomeSucceeded})
	}
	families, err := n.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"leasehold_queue_wait_seconds", "leasehold_run_seconds"} {
		labels, other := map[string]bool{}, uint64(0)
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "queue" {
						labels[l.GetValue()] = true
						if l.GetValue() == "(other)" {
							other += m.GetHistogram().GetSampleCount()
						}
					}
				}
			}
		}
		if len(labels) != 101 || !labels["tenant-0000"] || !labels["tenant-0099"] || labels["tenant-0100"] || other != queues-100 {
			t.Fatalf("%s: %d queue labels, %d observations under (other); want the first 100 queues and (other) with %d",
				name, len(labels), other, queues-100)
		}
	}
}
