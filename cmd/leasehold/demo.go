package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// runDemo walks a newcomer through a failover on the dev cluster: jobs and
// workers, the leader killed mid-job, a worker that vanishes and has its
// lease expire and re-granted with a larger token, its late report refused.
func runDemo(ctx context.Context, d *devCluster) error {
	say := func(format string, args ...any) {
		fmt.Printf("[demo %s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	cl, err := client.New(client.Config{Endpoints: devAPI})
	if err != nil {
		return err
	}
	defer cl.Close()
	waitLeader := func() (int, error) {
		for {
			if i := d.leader(); i >= 0 {
				return i, nil
			}
			select {
			case <-ctx.Done():
				return -1, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	leader, err := waitLeader()
	if err != nil {
		return err
	}
	say("node-%d leads", leader+1)

	// A vanished worker: it takes one job and never heartbeats.
	if _, err := cl.RegisterWorker(ctx, "ghost", 1); err != nil {
		return err
	}
	if _, _, err := cl.Submit(ctx, &pb.JobSpec{Id: "demo-ghost", Kind: "evaluation", Payload: []byte("taken by a worker that vanishes")}); err != nil {
		return err
	}
	ghost, err := cl.Acquire(ctx, &pb.AcquireRequest{WorkerId: "ghost", Queues: []string{"default"}})
	if err != nil || len(ghost.GetGrants()) != 1 {
		return fmt.Errorf("ghost acquire: %v", err)
	}
	ghostToken := ghost.GetGrants()[0].GetLease().GetToken()
	say("worker ghost took demo-ghost with token %d and will never heartbeat again", ghostToken)

	for i := 1; i <= 6; i++ {
		if _, _, err := cl.Submit(ctx, &pb.JobSpec{Id: fmt.Sprintf("demo-%d", i), Kind: "evaluation", Payload: []byte(fmt.Sprintf("job %d", i))}); err != nil {
			return err
		}
	}
	say("submitted demo-1 .. demo-6")

	var mu sync.Mutex
	ran := map[string][]uint64{}
	handler := func(worker string) client.Handler {
		return func(hctx context.Context, j *client.Job) (client.Result, error) {
			say("%s runs %s with token %d", worker, j.ID, j.Token)
			mu.Lock()
			ran[j.ID] = append(ran[j.ID], j.Token)
			mu.Unlock()
			select {
			case <-time.After(1500 * time.Millisecond):
				return client.Result{Ref: fmt.Sprintf("%s@%d", j.ID, j.Token)}, nil
			case <-hctx.Done():
				return client.Result{}, hctx.Err()
			}
		}
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, id := range []string{"alice", "bob"} {
		w, err := client.NewWorker(client.WorkerOptions{Client: cl, ID: id, Concurrency: 2, PollWait: 2 * time.Second,
			Handlers: map[string]client.Handler{"evaluation": handler(id)}, Logger: hclog.NewNullLogger()})
		if err != nil {
			stopWorkers()
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(wctx) }()
	}
	defer func() { stopWorkers(); wg.Wait() }()
	say("workers alice and bob started (2 jobs each at a time)")

	select {
	case <-time.After(700 * time.Millisecond):
	case <-ctx.Done():
		return nil
	}
	say("killing the leader, node-%d, while jobs run (kill -9 style: no handover)", leader+1)
	killed := leader
	d.kill(killed)
	if leader, err = waitLeader(); err != nil {
		return nil
	}
	say("node-%d leads now; it restarted every lease's clock at takeover, so no worker is charged for the election", leader+1)

	waitJobs := func(ids ...string) {
		for _, id := range ids {
			for ctx.Err() == nil {
				j, err := cl.Job(ctx, id)
				if err == nil && j.GetState() == pb.JobState_JOB_STATE_REPORTED {
					l := j.GetLeases()[len(j.GetLeases())-1]
					say("%s reported %s by %s, token %d, ref %s", id, enumName(l.GetOutcome().String(), "OUTCOME_"),
						l.GetWorkerId(), l.GetToken(), l.GetRef())
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	waitJobs("demo-1", "demo-2", "demo-3", "demo-4", "demo-5", "demo-6")

	say("restarting node-%d from its data", killed+1)
	if err := d.startNode(killed); err != nil {
		return err
	}
	for ctx.Err() == nil {
		if ms, err := cl.Members(ctx); err == nil && len(ms) == 3 && d.nodes[killed].node.Status().Ready {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	say("node-%d is back as a follower", killed+1)

	say("waiting for ghost's lease to expire (toleration %gs without a heartbeat)...", d.toleration*d.scale)
	for ctx.Err() == nil {
		j, err := cl.Job(ctx, "demo-ghost")
		if err == nil && j.GetState() == pb.JobState_JOB_STATE_REPORTED {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	j, err := cl.Job(ctx, "demo-ghost")
	if err != nil {
		return nil
	}
	for _, l := range j.GetLeases() {
		say("demo-ghost lease token %d: worker %s, %s", l.GetToken(), l.GetWorkerId(), enumName(l.GetState().String(), "LEASE_STATE_"))
	}
	_, err = cl.Report(ctx, &pb.ReportRequest{WorkerId: "ghost", JobId: "demo-ghost", Token: ghostToken,
		ReportId: "ghost-late", Outcome: pb.Outcome_OUTCOME_SUCCEEDED, Ref: "ghost-partial-output"})
	if errors.Is(err, client.ErrStaleToken) {
		say("ghost's late report with token %d was refused (STALE_TOKEN) and kept as a lease.stale_report event", ghostToken)
	}
	mu.Lock()
	for id, toks := range ran {
		if len(toks) > 1 {
			say("%s ran under tokens %v (each later token larger)", id, toks)
		}
	}
	mu.Unlock()
	say("done. The cluster keeps running: try leasehold events, leasehold job list; Ctrl-C stops it")
	<-ctx.Done()
	return nil
}
