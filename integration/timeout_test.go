package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// A job submitted with client.Timeout: past it, by the leader's clock, the
// running handler's context is cancelled with a kill; the attempt ends
// timed_out, and a job of one attempt ends out of attempts.
func TestTimeoutReachesHandler(t *testing.T) {
	c := clustertest.New(t, 3, slowExecutor())
	for _, n := range c.Nodes {
		n.Clock.MoveWall() // the leader's time moves with its fake clock
	}
	c.WaitFor(10*time.Second, "every voter's level recorded", func() bool {
		return c.Leader().ClusterLevel() >= fsm.CodecOf(&fsm.TimeOut{})
	})
	cl := newClient(t, c, nil)
	started := make(chan struct{})
	cause := make(chan error, 1)
	runWorker(t, client.WorkerOptions{Client: cl, ID: "w1", Handlers: map[string]client.Handler{
		"default": func(ctx context.Context, j *client.Job) (client.Result, error) {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return client.Result{}, ctx.Err()
		},
	}})
	job, _, err := cl.Submit(ctx(t), &pb.JobSpec{Id: "j", MaxAttempts: 1}, client.Timeout(time.Second))
	if err != nil || job.GetSpec().GetTimeout().AsDuration() != time.Second {
		t.Fatalf("submit with a timeout: %+v %v", job, err)
	}
	<-started
	leader := c.Leader()
	c.Run(leader.Index, 1200*time.Millisecond)
	var rev *client.RevokedError
	if err := <-cause; !errors.As(err, &rev) || !rev.Kill {
		t.Fatalf("handler's cause %v, want a kill", err)
	}
	done := waitJob(t, c, cl, "j", func(j *pb.Job) bool { return j.GetState() == pb.JobState_JOB_STATE_DEAD })
	l := done.GetLeases()[0]
	if l.GetOutcome() != pb.Outcome_OUTCOME_TIMED_OUT || !l.GetTimedOut() || l.GetRevoke() != pb.Revoke_REVOKE_KILL ||
		done.GetAttempts() != 1 || !strings.Contains(done.GetReason(), "out of attempts") {
		t.Fatalf("job after its timeout: %+v", done)
	}
}
