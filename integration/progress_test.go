package integration

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/cluster/clustertest"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// A Go handler's progress note reaches `job get` through the worker's
// heartbeats; when the leader is killed, the new leader holds none until
// the worker, seeing the new term in its answers, sends the note again:
// the handler does not publish twice.
func TestProgressNoteSurvivesFailoverBySendingAgain(t *testing.T) {
	c := clustertest.New(t, 3, slowExecutor())
	cl := newClient(t, c, nil)
	published, finish := make(chan struct{}), make(chan struct{})
	runWorker(t, client.WorkerOptions{Client: cl, ID: "w1", Handlers: map[string]client.Handler{
		"default": func(ctx context.Context, j *client.Job) (client.Result, error) {
			j.Progress("step 1 of 2")
			close(published)
			select {
			case <-finish:
				return client.Result{Ref: "done"}, nil
			case <-ctx.Done():
				return client.Result{}, ctx.Err()
			}
		},
	}})
	if _, _, err := cl.Submit(ctx(t), &pb.JobSpec{Id: "j"}); err != nil {
		t.Fatal(err)
	}
	<-published
	j := waitJob(t, c, cl, "j", func(j *pb.Job) bool { return j.GetProgress() != "" })
	if j.GetProgress() != "step 1 of 2" || j.GetProgressAt() == nil || j.GetState() != pb.JobState_JOB_STATE_RUNNING {
		t.Fatalf("job %v: want running with its note", j)
	}
	old := c.Leader()
	tok := j.GetLeases()[0].GetToken()
	c.Kill(old.Index)
	leader := c.Leader()
	c.WaitFor(20*clustertest.Grace, "the new leader to hear the note again", func() bool {
		_, ok := leader.Progress("j", tok)
		return ok
	})
	if j := waitJob(t, c, cl, "j", func(j *pb.Job) bool { return j.GetProgress() != "" }); j.GetProgress() != "step 1 of 2" {
		t.Fatalf("after failover the job shows %q", j.GetProgress())
	}
	close(finish)
	done := waitJob(t, c, cl, "j", func(j *pb.Job) bool { return j.GetState() == pb.JobState_JOB_STATE_REPORTED })
	if done.GetProgress() != "" {
		t.Fatalf("the reported job shows %q", done.GetProgress())
	}
	c.Restart(old.Index)
	c.Converged()
}
