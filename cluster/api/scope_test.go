package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// A credential acts only as the identities it names. Worker token A, named
// for wA and pool-a-*, once reported on B's lease, released B's other
// lease, heartbeated as B and deregistered B; a submitter cancelled
// another submitter's jobs (and may not retry or purge them, nor purge by
// queue or age, which reaches every submitter's). Each is now PERMISSION_DENIED, audited, and
// changes nothing.
func TestCredentialsActOnlyAsTheirIdentities(t *testing.T) {
	c := tokenCluster(t, false)
	leader := c.Leader()
	base := "http://" + leader.APIAddr
	ops := leaseholdv1connect.NewWorkerServiceClient(http.DefaultClient, base, bearer(opsSecret))
	jobsOps := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, base, bearer(opsSecret))
	asA := leaseholdv1connect.NewWorkerServiceClient(http.DefaultClient, base, bearer(workerASecret))
	ci := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, base, bearer(subSecret))
	ci2 := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, base, bearer(ci2Secret))

	// B holds two leases (set up with the admin token).
	if _, err := ops.RegisterWorker(callCtx(t), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: "wB", Capacity: 4})); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b1", "b2"} {
		if _, err := ci2.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: id, Queue: "q", Kind: "k"}})); err != nil {
			t.Fatal(err)
		}
	}
	acq, err := ops.Acquire(callCtx(t), connect.NewRequest(&pb.AcquireRequest{WorkerId: "wB", RequestId: "r1", Queues: []string{"q"}, Max: 2}))
	if err != nil || len(acq.Msg.GetGrants()) != 2 {
		t.Fatalf("acquire as B: %v", err)
	}
	g := acq.Msg.GetGrants()
	if j, _ := leader.FSM().Job("b1"); j.Submitter != "ci2" {
		t.Fatalf("a job submitted by ci2 without a submitter is %q's", j.Submitter)
	}
	// The refusals are audited (events), so compare what they would have
	// changed: jobs, leases and workers.
	stateOf := func() string {
		jobs, _ := leader.FSM().Jobs(fsm.JobFilter{})
		return fmt.Sprint(jobs, leader.FSM().Workers())
	}
	before := stateOf()

	denied := func(what string, err error) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodePermissionDenied || transport.DetailOf(err).GetReason() != transport.ReasonForbidden {
			t.Fatalf("%s: %v, want PERMISSION_DENIED", what, err)
		}
	}
	_, err = asA.Report(callCtx(t), connect.NewRequest(&pb.ReportRequest{WorkerId: "wB", JobId: g[0].GetLease().GetJobId(),
		Token: g[0].GetLease().GetToken(), ReportId: "x", Outcome: pb.Outcome_OUTCOME_SUCCEEDED}))
	denied("report on B's lease", err)
	_, err = asA.Release(callCtx(t), connect.NewRequest(&pb.ReleaseRequest{WorkerId: "wB", JobId: g[1].GetLease().GetJobId(), Token: g[1].GetLease().GetToken()}))
	denied("release B's lease", err)
	_, err = asA.Heartbeat(callCtx(t), connect.NewRequest(&pb.HeartbeatRequest{WorkerId: "wB"}))
	denied("heartbeat as B", err)
	_, err = asA.DeregisterWorker(callCtx(t), connect.NewRequest(&pb.DeregisterWorkerRequest{WorkerId: "wB"}))
	denied("deregister B", err)
	_, err = asA.RegisterWorker(callCtx(t), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: "pool-b-1", Capacity: 1}))
	denied("register outside its prefix", err)
	_, err = ci.CancelSubmitterJobs(callCtx(t), connect.NewRequest(&pb.CancelSubmitterJobsRequest{Submitter: "ci2"}))
	denied("cancel another submitter's jobs", err)
	_, err = ci.CancelJob(callCtx(t), connect.NewRequest(&pb.CancelJobRequest{Id: "b1"}))
	denied("cancel another submitter's job", err)
	_, err = ci.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "x", Queue: "q", Kind: "k", Submitter: "ci2"}}))
	denied("submit as another submitter", err)
	_, err = ci.RetryJob(callCtx(t), connect.NewRequest(&pb.RetryJobRequest{Id: "b1"}))
	denied("retry another submitter's job", err)
	_, err = ci.PurgeJobs(callCtx(t), connect.NewRequest(&pb.PurgeJobsRequest{Ids: []string{"mine-none", "b1"}}))
	denied("purge another submitter's job", err)
	_, err = ci.PurgeJobs(callCtx(t), connect.NewRequest(&pb.PurgeJobsRequest{Queue: "q"}))
	denied("purge every submitter's dead jobs by queue", err)
	if after := stateOf(); after != before {
		t.Fatalf("a refused call changed the state:\n%s\n%s", before, after)
	}

	// What the credentials do name still works.
	if _, err := asA.RegisterWorker(callCtx(t), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: "pool-a-7", Capacity: 1})); err != nil {
		t.Fatalf("register within its prefix: %v", err)
	}
	if _, err := ci.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "mine", Queue: "q", Kind: "k", Submitter: "ci"}})); err != nil {
		t.Fatalf("submit as itself: %v", err)
	}
	if _, err := jobsOps.CancelJob(callCtx(t), connect.NewRequest(&pb.CancelJobRequest{Id: "b1"})); err != nil {
		t.Fatalf("admin cancel: %v", err)
	}
	c.WaitFor(10*time.Second, "the refusals audited", func() bool {
		var n int
		for _, ev := range leader.FSM().Events(0, fsm.MaxPageSize).Events {
			if ev.Type == fsm.EventAudit && strings.HasPrefix(ev.Detail, "auth.denied") {
				n++
			}
		}
		return n == 11
	})
}
