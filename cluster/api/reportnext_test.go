package api_test

import (
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// reportNextFixture is a cluster with one worker of capacity 1 holding
// job a, and jobs b and c queued behind it.
type reportNextFixture struct {
	workers     leaseholdv1connect.WorkerServiceClient
	viaFollower leaseholdv1connect.WorkerServiceClient
	jobs        leaseholdv1connect.JobServiceClient
	token       uint64 // a's lease
}

func newReportNextFixture(t *testing.T) *reportNextFixture {
	t.Helper()
	c := clustertest.New(t, 3)
	leader := c.Leader()
	follower := c.Nodes[(leader.Index+1)%3]
	f := &reportNextFixture{
		workers:     leaseholdv1connect.NewWorkerServiceClient(http.DefaultClient, "http://"+leader.APIAddr),
		viaFollower: leaseholdv1connect.NewWorkerServiceClient(http.DefaultClient, "http://"+follower.APIAddr),
		jobs:        leaseholdv1connect.NewJobServiceClient(http.DefaultClient, "http://"+leader.APIAddr),
	}
	if _, err := f.workers.RegisterWorker(callCtx(t), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: "w", Capacity: 1})); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := f.jobs.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: id, Queue: "q", Kind: "k"}})); err != nil {
			t.Fatal(err)
		}
	}
	acq, err := f.workers.Acquire(callCtx(t), connect.NewRequest(&pb.AcquireRequest{WorkerId: "w", RequestId: "r0", Queues: []string{"q"}, Start: true}))
	if err != nil || len(acq.Msg.GetGrants()) != 1 || acq.Msg.GetGrants()[0].GetJob().GetSpec().GetId() != "a" {
		t.Fatalf("acquire a: %v %v", acq, err)
	}
	f.token = acq.Msg.GetGrants()[0].GetLease().GetToken()
	return f
}

func (f *reportNextFixture) state(t *testing.T, id string) pb.JobState {
	t.Helper()
	j, err := f.jobs.GetJob(callCtx(t), connect.NewRequest(&pb.GetJobRequest{Id: id}))
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return j.Msg.GetJob().GetState()
}

// A report that carries next ends the lease and takes the worker's next
// job in the same call, through a follower as through the leader; sent
// again with the same ids it answers as the first time, granting nothing
// more. With no job left, next answers with no grant.
func TestReportNextTakesTheNextJob(t *testing.T) {
	f := newReportNextFixture(t)
	req := &pb.ReportRequest{WorkerId: "w", JobId: "a", Token: f.token, ReportId: "rep-a", Outcome: pb.Outcome_OUTCOME_SUCCEEDED,
		Next: &pb.AcquireRequest{RequestId: "r1", Queues: []string{"q"}, Start: true}}
	res, err := f.viaFollower.Report(callCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("report a with next: %v", err)
	}
	if res.Msg.GetState() != pb.JobState_JOB_STATE_REPORTED {
		t.Fatalf("a is %v after its report, want reported", res.Msg.GetState())
	}
	grants := res.Msg.GetNext().GetGrants()
	if len(grants) != 1 || grants[0].GetJob().GetSpec().GetId() != "b" {
		t.Fatalf("next granted %v, want b", grants)
	}
	tokB := grants[0].GetLease().GetToken()
	if tokB <= f.token || grants[0].GetLease().GetWorkerId() != "w" || grants[0].GetJob().GetState() != pb.JobState_JOB_STATE_RUNNING {
		t.Fatalf("b's lease %v: want worker w, the job running, a token above a's %d", grants[0].GetLease(), f.token)
	}

	again, err := f.workers.Report(callCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("the same report again: %v", err)
	}
	if g := again.Msg.GetNext().GetGrants(); len(g) != 1 || g[0].GetLease().GetToken() != tokB || !again.Msg.GetNext().GetReplayed() {
		t.Fatalf("sent again, next answered %v, want b's lease %d replayed", again.Msg.GetNext(), tokB)
	}
	if s := f.state(t, "c"); s != pb.JobState_JOB_STATE_QUEUED {
		t.Fatalf("c is %v: the replay granted more", s)
	}

	// b's report takes c; c's finds nothing left and waits for nothing.
	res, err = f.workers.Report(callCtx(t), connect.NewRequest(&pb.ReportRequest{WorkerId: "w", JobId: "b", Token: tokB,
		ReportId: "rep-b", Outcome: pb.Outcome_OUTCOME_SUCCEEDED, Next: &pb.AcquireRequest{WorkerId: "w", RequestId: "r2", Queues: []string{"q"}, Start: true}}))
	if err != nil || len(res.Msg.GetNext().GetGrants()) != 1 {
		t.Fatalf("report b with next: %v, %v", res, err)
	}
	tokC := res.Msg.GetNext().GetGrants()[0].GetLease().GetToken()
	res, err = f.workers.Report(callCtx(t), connect.NewRequest(&pb.ReportRequest{WorkerId: "w", JobId: "c", Token: tokC,
		ReportId: "rep-c", Outcome: pb.Outcome_OUTCOME_SUCCEEDED, Next: &pb.AcquireRequest{RequestId: "r3", Queues: []string{"q"}, Start: true}}))
	if err != nil || res.Msg.GetNext() == nil || len(res.Msg.GetNext().GetGrants()) != 0 {
		t.Fatalf("report c with next, nothing queued: %v, %v; want an empty next", res, err)
	}
}

// Nothing is half-applied: a next that is invalid or names another worker
// is refused before the report applies, and a refused report (a stale
// token) makes no acquire.
func TestReportNextRefusals(t *testing.T) {
	f := newReportNextFixture(t)
	bad := []struct {
		name, field string
		next        *pb.AcquireRequest
	}{
		{"another worker", "next.worker_id", &pb.AcquireRequest{WorkerId: "other", RequestId: "r1", Queues: []string{"q"}}},
		{"a bad queue", "next.queues", &pb.AcquireRequest{RequestId: "r1", Queues: []string{"bad queue\n"}}},
		{"no request id", "next.request_id", &pb.AcquireRequest{Queues: []string{"q"}}},
		{"a bad wait", "next.wait", &pb.AcquireRequest{RequestId: "r1", Queues: []string{"q"}, Wait: &durationpb.Duration{Nanos: -5, Seconds: 1}}},
	}
	for _, b := range bad {
		_, err := f.workers.Report(callCtx(t), connect.NewRequest(&pb.ReportRequest{WorkerId: "w", JobId: "a", Token: f.token,
			ReportId: "rep-a", Outcome: pb.Outcome_OUTCOME_SUCCEEDED, Next: b.next}))
		if reasonOf(err) != transport.ReasonInvalidArgument || !strings.HasPrefix(transport.DetailOf(err).GetField(), b.field) {
			t.Fatalf("%s: %v (field %q), want INVALID_ARGUMENT naming %s", b.name, err, transport.DetailOf(err).GetField(), b.field)
		}
		if s := f.state(t, "a"); s != pb.JobState_JOB_STATE_RUNNING {
			t.Fatalf("%s: a is %v: the report applied", b.name, s)
		}
	}

	_, err := f.workers.Report(callCtx(t), connect.NewRequest(&pb.ReportRequest{WorkerId: "w", JobId: "a", Token: f.token + 1000,
		ReportId: "rep-stale", Outcome: pb.Outcome_OUTCOME_SUCCEEDED,
		Next: &pb.AcquireRequest{RequestId: "r2", Queues: []string{"q"}, Start: true}}))
	if reasonOf(err) == "" {
		t.Fatalf("a made-up token with next: %v, want a refusal", err)
	}
	// Released, a's lease ends; a report with its token is stale.
	if _, err := f.workers.Release(callCtx(t), connect.NewRequest(&pb.ReleaseRequest{WorkerId: "w", JobId: "a", Token: f.token})); err != nil {
		t.Fatal(err)
	}
	_, err = f.workers.Report(callCtx(t), connect.NewRequest(&pb.ReportRequest{WorkerId: "w", JobId: "a", Token: f.token,
		ReportId: "rep-stale2", Outcome: pb.Outcome_OUTCOME_SUCCEEDED,
		Next: &pb.AcquireRequest{RequestId: "r3", Queues: []string{"q"}, Start: true}}))
	if reasonOf(err) != transport.ReasonStaleToken {
		t.Fatalf("a stale report with next: %v, want STALE_TOKEN", err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if s := f.state(t, id); s != pb.JobState_JOB_STATE_QUEUED {
			t.Fatalf("%s is %v after refused reports: an acquire was made", id, s)
		}
	}
}
