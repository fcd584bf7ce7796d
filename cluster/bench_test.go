package cluster_test

// Throughput of a 3-node cluster on loopback, with raft-boltdb fsyncing on
// every append to the test's temporary directory:
//
//	go test -run '^$' -bench . -benchtime 3s ./cluster/
//
// BenchmarkAcquireReport/c=N: N callers, each its own worker, each cycle an
// acquire (one lease) and its report, both committed; jobs are submitted
// before the timer starts. BenchmarkHeartbeat/c=N: N workers holding one
// lease each heartbeat the leader as fast as it answers; one quorum check
// serves every heartbeat waiting for it.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

var benchCallers = []int{1, 16, 64}

// parallel runs fn(worker, i) for i in [0, n) on c goroutines.
func parallel(c, n int, fn func(worker, i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(w, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func BenchmarkAcquireReport(b *testing.B) {
	for _, callers := range benchCallers {
		b.Run(fmt.Sprintf("c=%d", callers), func(b *testing.B) {
			c := clustertest.New(b, 3)
			leader := c.Leader()
			bg := context.Background()
			for w := range callers {
				if _, err := leader.Apply(bg, &fsm.RegisterWorker{WorkerID: fmt.Sprintf("w%d", w), Capacity: 1}); err != nil {
					b.Fatal(err)
				}
			}
			err := parallel(64, b.N, func(_, i int) error {
				_, err := leader.Apply(bg, &fsm.SubmitJob{Spec: spec(fmt.Sprintf("job-%d", i), fsm.LostRequeue)})
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			err = parallel(callers, b.N, func(w, i int) error {
				worker := fmt.Sprintf("w%d", w)
				res, err := leader.Acquire(bg, fsm.Acquire{WorkerID: worker, RequestID: fmt.Sprintf("r%d", i),
					Queues: []string{"default"}, Max: 1}, time.Second)
				if err != nil || len(res.Grants) != 1 {
					return fmt.Errorf("acquire %d: %+v %v", i, res, err)
				}
				g := res.Grants[0]
				_, err = leader.Apply(bg, &fsm.Report{WorkerID: worker, JobID: g.Job.ID, Token: g.Lease.Token,
					ReportID: "r", Outcome: fsm.OutcomeSucceeded})
				return err
			})
			elapsed := time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if n := leader.FSM().Stats().Jobs[fsm.JobReported]; n != b.N {
				b.Fatalf("%d jobs reported, want %d", n, b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pairs/s")
		})
	}
}

func BenchmarkHeartbeat(b *testing.B) {
	for _, callers := range benchCallers {
		b.Run(fmt.Sprintf("c=%d", callers), func(b *testing.B) {
			c := clustertest.New(b, 3)
			leader := c.Leader()
			bg := context.Background()
			held := make([][]fsm.LeaseRef, callers)
			for w := range callers {
				worker := fmt.Sprintf("w%d", w)
				id := fmt.Sprintf("job-%d", w)
				if _, err := leader.Apply(bg, &fsm.RegisterWorker{WorkerID: worker, Capacity: 1}); err != nil {
					b.Fatal(err)
				}
				if _, err := leader.Apply(bg, &fsm.SubmitJob{Spec: spec(id, fsm.LostRequeue)}); err != nil {
					b.Fatal(err)
				}
				res, err := leader.Acquire(bg, fsm.Acquire{WorkerID: worker, RequestID: "r", Queues: []string{"default"}, Max: 1}, time.Second)
				if err != nil || len(res.Grants) != 1 {
					b.Fatalf("acquire: %+v %v", res, err)
				}
				held[w] = []fsm.LeaseRef{{JobID: res.Grants[0].Job.ID, Token: res.Grants[0].Lease.Token}}
			}
			b.ResetTimer()
			start := time.Now()
			err := parallel(callers, b.N, func(w, _ int) error {
				res, err := leader.Heartbeat(bg, fmt.Sprintf("w%d", w), held[w])
				if err == nil && res.Leases[0].Verdict.String() != "keep" {
					err = fmt.Errorf("verdict %s", res.Leases[0].Verdict)
				}
				return err
			})
			elapsed := time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "heartbeats/s")
		})
	}
}

// BenchmarkClusterLevel is the leader's answer to "may this entry be
// proposed": every command's level check, and the API's before it adds a
// default retry policy to a submitted job, ask it.
func BenchmarkClusterLevel(b *testing.B) {
	c := clustertest.New(b, 3)
	leader := c.Leader()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if leader.ClusterLevel() == 0 {
			b.Fatal("no level")
		}
	}
}
