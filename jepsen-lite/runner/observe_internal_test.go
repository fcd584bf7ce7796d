package runner

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/h2ctest"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// movingJobs serves one job that is running when the first list is read
// and scheduled for its retry from then on (its worker reported the kill
// of a timed-out lease between two reads).
type movingJobs struct {
	leaseholdv1connect.UnimplementedJobServiceHandler
	mu    sync.Mutex
	lists int
}

func (m *movingJobs) ListJobs(_ context.Context, req *connect.Request[leaseholdv1.ListJobsRequest]) (*connect.Response[leaseholdv1.ListJobsResponse], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lists++
	state := leaseholdv1.JobState_JOB_STATE_RUNNING
	if m.lists > 1 {
		state = leaseholdv1.JobState_JOB_STATE_SCHEDULED
	}
	res := &leaseholdv1.ListJobsResponse{}
	if f := req.Msg.GetState(); f == leaseholdv1.JobState_JOB_STATE_UNSPECIFIED || f == state {
		res.Jobs = append(res.Jobs, &leaseholdv1.Job{Spec: &leaseholdv1.JobSpec{Id: "j1", Queue: "default"}, State: state})
	}
	return connect.NewResponse(res), nil
}

// The drain's count of unfinished jobs does not miss a job that moves
// between states while it reads: with one list per state, a job running
// when the scheduled jobs were listed and scheduled when the running ones
// were was in none of them, and the drain ended with the job unfinished.
func TestUnfinishedCountsAJobThatMoves(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(leaseholdv1connect.NewJobServiceHandler(&movingJobs{}))
	srv := h2ctest.Start(t, mux)
	cl, err := client.New(client.Config{Endpoints: []string{strings.TrimPrefix(srv.URL, "http://")}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c := &cluster{client: cl}
	n, err := c.unfinished(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d unfinished jobs counted, want 1", n)
	}
}
