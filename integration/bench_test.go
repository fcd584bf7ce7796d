package integration

// End-to-end throughput through the API (Connect over HTTP/1.1 on loopback)
// of a 3-node in-process cluster, raft-boltdb fsyncing to a temporary dir:
//
//	go test -run '^$' -bench . -benchtime 5s ./integration/
//
// BenchmarkJobCycle/w=N: N workers, each cycling submit, acquire, report
// (three commits) as fast as it can; reports cycles/s and the p50/p99 of a
// whole cycle. BenchmarkHeartbeats: 1,000 workers holding 10 leases each,
// heartbeating on 64 connections; reports heartbeats/s (10 leases renewed
// per heartbeat).

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster/clustertest"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

func BenchmarkJobCycle(b *testing.B) {
	for _, workers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("w=%d", workers), func(b *testing.B) {
			c := clustertest.New(b, 3, slowExecutor())
			cl := newClient(b, c, nil)
			for w := range workers {
				if _, err := cl.RegisterWorker(ctx(b), fmt.Sprintf("w%d", w), 1); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			lat := make([][]time.Duration, workers)
			errs := make(chan error, workers)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					worker := fmt.Sprintf("w%d", w)
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						t0 := time.Now()
						id := fmt.Sprintf("job-%d", i)
						// Each worker has its own queue: a cycle takes its own job.
						if _, _, err := cl.Submit(ctx(b), &pb.JobSpec{Id: id, Queue: worker}); err != nil {
							errs <- err
							return
						}
						res, err := cl.Acquire(ctx(b), &pb.AcquireRequest{WorkerId: worker, Queues: []string{worker}})
						if err != nil || len(res.GetGrants()) != 1 {
							errs <- fmt.Errorf("acquire: %v %v", res, err)
							return
						}
						g := res.GetGrants()[0]
						if _, err := cl.Report(ctx(b), &pb.ReportRequest{WorkerId: worker, JobId: id, Token: g.GetLease().GetToken(),
							Outcome: pb.Outcome_OUTCOME_SUCCEEDED}); err != nil {
							errs <- err
							return
						}
						lat[w] = append(lat[w], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			all := slices.Concat(lat...)
			slices.Sort(all)
			if st, err := cl.Status(ctx(b)); err == nil {
				for _, jc := range st.GetJobs() {
					if jc.GetState() == pb.JobState_JOB_STATE_REPORTED && jc.GetCount() != uint64(b.N) {
						b.Fatalf("%d jobs reported, %d cycles", jc.GetCount(), b.N)
					}
				}
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

func BenchmarkHeartbeats(b *testing.B) {
	const workers, leases, callers = 1000, 10, 64
	c := clustertest.New(b, 3, slowExecutor())
	cl := newClient(b, c, nil)
	held := make([][]*pb.LeaseRef, workers)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	var setup atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				w := int(setup.Add(1)) - 1
				if w >= workers {
					return
				}
				id := fmt.Sprintf("w%d", w)
				if _, err := cl.RegisterWorker(ctx(b), id, leases); err != nil {
					errs <- err
					return
				}
				for l := range leases {
					if _, _, err := cl.Submit(ctx(b), &pb.JobSpec{Id: fmt.Sprintf("%s-%d", id, l), Queue: id}); err != nil {
						errs <- err
						return
					}
				}
				res, err := cl.Acquire(ctx(b), &pb.AcquireRequest{WorkerId: id, Queues: []string{id}, Max: leases})
				if err != nil || len(res.GetGrants()) != leases {
					errs <- fmt.Errorf("acquire: %d grants %v", len(res.GetGrants()), err)
					return
				}
				for _, g := range res.GetGrants() {
					held[w] = append(held[w], &pb.LeaseRef{JobId: g.GetJob().GetSpec().GetId(), Token: g.GetLease().GetToken()})
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				w := int(i % workers)
				res, err := cl.Heartbeat(ctx(b), fmt.Sprintf("w%d", w), held[w])
				if err != nil || len(res.GetLeases()) != leases || res.GetLeases()[0].GetVerdict() != pb.Verdict_VERDICT_KEEP {
					errs <- fmt.Errorf("heartbeat: %v %v", res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "heartbeats/s")
	b.ReportMetric(float64(b.N*leases)/elapsed.Seconds(), "leases-renewed/s")
}
