package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// Queues are steered by admins only: a submitter or worker may neither
// list nor pause them, though cluster status, which they may read, shows
// every queue's settings. An admin's pause sent to a follower goes to the
// leader; what the API cannot take is refused naming the field.
func TestQueueServiceIsAdminOnly(t *testing.T) {
	c := tokenCluster(t, false)
	leader := c.Leader()
	follower := c.Nodes[(leader.Index+1)%3]
	queues := func(addr, secret string) leaseholdv1connect.QueueServiceClient {
		return leaseholdv1connect.NewQueueServiceClient(http.DefaultClient, "http://"+addr, bearer(secret))
	}
	for _, secret := range []string{subSecret, workerASecret} {
		q := queues(leader.APIAddr, secret)
		if _, err := q.PauseQueue(callCtx(t), connect.NewRequest(&pb.PauseQueueRequest{Queue: "q"})); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("pause as a non-admin: %v, want PERMISSION_DENIED", err)
		}
		if _, err := q.ListQueues(callCtx(t), connect.NewRequest(&pb.ListQueuesRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("list as a non-admin: %v, want PERMISSION_DENIED", err)
		}
	}
	if s := leader.FSM().QueueSettingsOf(); len(s) != 0 {
		t.Fatalf("a refused pause changed the settings: %+v", s)
	}

	ops := queues(follower.APIAddr, opsSecret)
	var res *connect.Response[pb.PauseQueueResponse]
	var err error
	c.WaitFor(10*time.Second, "a pause through the follower", func() bool { // past an election (UNAVAILABLE)
		res, err = ops.PauseQueue(callCtx(t), connect.NewRequest(&pb.PauseQueueRequest{Queue: "q"}))
		return connect.CodeOf(err) != connect.CodeUnavailable
	})
	if err != nil || !res.Msg.GetSettings().GetPaused() {
		t.Fatalf("admin pause through a follower: %v %v", res, err)
	}
	if _, err := ops.SetQueueLimit(callCtx(t), connect.NewRequest(&pb.SetQueueLimitRequest{Queue: "q", MaxRunning: 4})); err != nil {
		t.Fatal(err)
	}
	// Each change is audited with who made it (the caller the follower
	// vouched for).
	c.WaitFor(10*time.Second, "the changes audited", func() bool {
		p, l := audits(leader, "queue.pause"), audits(leader, "queue.limit")
		return len(p) == 1 && len(l) == 1 && p[0].Actor == "token:ops" && strings.Contains(l[0].Detail, "queue q: paused true, max running 4")
	})
	list, err := queues(leader.APIAddr, opsSecret).ListQueues(callCtx(t), connect.NewRequest(&pb.ListQueuesRequest{}))
	if err != nil || len(list.Msg.GetQueues()) != 1 || !list.Msg.GetQueues()[0].GetPaused() || list.Msg.GetQueues()[0].GetMaxRunning() != 4 {
		t.Fatalf("list: %v %v", list, err)
	}
	st, err := leaseholdv1connect.NewClusterServiceClient(http.DefaultClient, "http://"+leader.APIAddr, bearer(subSecret)).
		Status(callCtx(t), connect.NewRequest(&pb.StatusRequest{}))
	if err != nil || len(st.Msg.GetQueues()) != 1 || st.Msg.GetQueues()[0].GetName() != "q" || !st.Msg.GetQueues()[0].GetPaused() {
		t.Fatalf("status as a submitter: %v %v", st, err)
	}

	for _, tc := range []struct {
		field string
		call  func() error
	}{
		{"queue", func() error {
			_, err := ops.PauseQueue(callCtx(t), connect.NewRequest(&pb.PauseQueueRequest{Queue: "no/slash"}))
			return err
		}},
		{"max_running", func() error {
			_, err := ops.SetQueueLimit(callCtx(t), connect.NewRequest(&pb.SetQueueLimitRequest{Queue: "q", MaxRunning: 2_000_000}))
			return err
		}},
		{"page_token", func() error {
			_, err := ops.ListQueues(callCtx(t), connect.NewRequest(&pb.ListQueuesRequest{PageToken: "has space"}))
			return err
		}},
	} {
		err := tc.call()
		if d := transport.DetailOf(err); connect.CodeOf(err) != connect.CodeInvalidArgument || d.GetField() != tc.field {
			t.Errorf("%s: %v (detail %v), want INVALID_ARGUMENT on it", tc.field, err, d)
		}
	}
}
