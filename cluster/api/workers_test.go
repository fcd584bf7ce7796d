package api_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/cluster/api"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// workersByID lists the workers through client at the consistency asked.
func workersByID(t *testing.T, client leaseholdv1connect.WorkerServiceClient, c pb.Consistency) map[string]*pb.Worker {
	t.Helper()
	res, err := client.ListWorkers(callCtx(t), connect.NewRequest(&pb.ListWorkersRequest{Consistency: c}))
	if err != nil {
		t.Fatalf("list workers: %v", err)
	}
	out := map[string]*pb.Worker{}
	for _, w := range res.Msg.GetWorkers() {
		out[w.GetId()] = w
	}
	return out
}

// A worker's record carries what the state says (capacity, live leases)
// and what only the leader knows (state, silence): a read the leader
// serves, directly or forwarded by a follower, fills it in; a stale read
// on a follower says unknown. A worker silent past grace is unreachable,
// as the leader announced it, and active again once heard.
func TestWorkerRecordsShowPresence(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	follower := c.Nodes[(leader.Index+1)%3]
	viaLeader := leaseholdv1connect.NewWorkerServiceClient(http.DefaultClient, "http://"+leader.APIAddr)
	viaFollower := leaseholdv1connect.NewWorkerServiceClient(http.DefaultClient, "http://"+follower.APIAddr)
	jobs := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, "http://"+leader.APIAddr)

	for _, w := range []*pb.RegisterWorkerRequest{{WorkerId: "busy", Capacity: 2, Version: "v1.2.3"}, {WorkerId: "idle", Capacity: 1}} {
		if _, err := viaLeader.RegisterWorker(callCtx(t), connect.NewRequest(w)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := jobs.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "j1", Queue: "q", Kind: "k"}})); err != nil {
		t.Fatal(err)
	}
	acq, err := viaLeader.Acquire(callCtx(t), connect.NewRequest(&pb.AcquireRequest{WorkerId: "busy", RequestId: "r1", Queues: []string{"q"}}))
	if err != nil || len(acq.Msg.GetGrants()) != 1 {
		t.Fatalf("acquire: %v", err)
	}
	token := acq.Msg.GetGrants()[0].GetLease().GetToken()

	// The leader's answer, forwarded by the follower.
	ws := workersByID(t, viaFollower, pb.Consistency_CONSISTENCY_LINEARIZABLE)
	busy, idle := ws["busy"], ws["idle"]
	if busy.GetState() != pb.WorkerState_WORKER_STATE_ACTIVE || idle.GetState() != pb.WorkerState_WORKER_STATE_ACTIVE {
		t.Fatalf("just registered, read through the leader: busy %v, idle %v", busy.GetState(), idle.GetState())
	}
	if busy.GetSilence() == nil || busy.GetLastHeard() == nil || busy.GetSilence().AsDuration() > clustertest.Grace {
		t.Fatalf("busy's silence %v, last heard %v", busy.GetSilence(), busy.GetLastHeard())
	}
	if busy.GetCapacity() != 2 || busy.GetLeaseCount() != 1 || len(busy.GetLeases()) != 1 ||
		busy.GetLeases()[0].GetToken() != token || busy.GetLeases()[0].GetJobId() != "j1" {
		t.Fatalf("busy's leases: count %d, %v; want j1 under token %d", busy.GetLeaseCount(), busy.GetLeases(), token)
	}
	if idle.GetLeaseCount() != 0 || len(idle.GetLeases()) != 0 {
		t.Fatalf("idle holds %d leases", idle.GetLeaseCount())
	}
	if busy.GetVersion() != "v1.2.3" || idle.GetVersion() != "" {
		t.Fatalf("versions %q and %q, want the one busy said and none", busy.GetVersion(), idle.GetVersion())
	}
	// A bad version is refused, naming the field.
	_, err = viaLeader.RegisterWorker(callCtx(t), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: "odd", Capacity: 1, Version: "1 2"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || transport.DetailOf(err).GetField() != "version" {
		t.Fatalf("a version with a space: %v (detail %v)", err, transport.DetailOf(err))
	}

	// A stale read on the follower: the state's part, no presence.
	c.WaitFor(10*time.Second, "the follower has the lease", func() bool {
		return len(follower.FSM().WorkerLeases("busy")) == 1
	})
	stale := workersByID(t, viaFollower, pb.Consistency_CONSISTENCY_STALE)
	if b := stale["busy"]; b.GetState() != pb.WorkerState_WORKER_STATE_UNKNOWN || b.GetSilence() != nil || b.GetLastHeard() != nil ||
		b.GetLeaseCount() != 1 || b.GetCapacity() != 2 || b.GetVersion() != "v1.2.3" {
		t.Fatalf("a stale read on a follower: %v", b)
	}
	// A stale read the leader serves still knows.
	if b := workersByID(t, viaLeader, pb.Consistency_CONSISTENCY_STALE)["busy"]; b.GetState() != pb.WorkerState_WORKER_STATE_ACTIVE {
		t.Fatalf("a stale read on the leader: %v", b.GetState())
	}

	// Past the bound on lease refs in a list: counts only; GetWorker still
	// names them.
	restore := api.SetMaxListedLeases(0)
	capped := workersByID(t, viaLeader, pb.Consistency_CONSISTENCY_LINEARIZABLE)["busy"]
	restore()
	if capped.GetLeaseCount() != 1 || len(capped.GetLeases()) != 0 {
		t.Fatalf("a list past the bound: count %d, refs %v", capped.GetLeaseCount(), capped.GetLeases())
	}

	// GetWorker: one, the same; not registered is NOT_FOUND.
	restore = api.SetMaxListedLeases(0)
	got, err := viaFollower.GetWorker(callCtx(t), connect.NewRequest(&pb.GetWorkerRequest{WorkerId: "busy"}))
	restore()
	if err != nil || got.Msg.GetWorker().GetState() != pb.WorkerState_WORKER_STATE_ACTIVE || got.Msg.GetWorker().GetLeaseCount() != 1 ||
		len(got.Msg.GetWorker().GetLeases()) != 1 || got.Msg.GetWorker().GetLeases()[0].GetToken() != token {
		t.Fatalf("get busy: %v %v", got, err)
	}
	if _, err := viaLeader.GetWorker(callCtx(t), connect.NewRequest(&pb.GetWorkerRequest{WorkerId: "nobody"})); connect.CodeOf(err) != connect.CodeNotFound ||
		transport.DetailOf(err).GetReason() != transport.ReasonNotFound {
		t.Fatalf("get an unregistered worker: %v", err)
	}
	if _, err := viaLeader.GetWorker(callCtx(t), connect.NewRequest(&pb.GetWorkerRequest{})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("get without an id: %v", err)
	}

	// Past grace on the leader's clock, with idle heard every renew and
	// busy silent: busy is unreachable, idle active.
	beat := func(worker string, leases ...*pb.LeaseRef) {
		t.Helper()
		if _, err := viaLeader.Heartbeat(callCtx(t), connect.NewRequest(&pb.HeartbeatRequest{WorkerId: worker, Leases: leases})); err != nil {
			t.Fatalf("heartbeat %s: %v", worker, err)
		}
	}
	for range int(clustertest.Grace/clustertest.Renew) + 2 {
		beat("idle")
		c.Run(leader.Index, clustertest.Renew)
	}
	c.WaitFor(10*time.Second, "busy announced unreachable", func() bool {
		for _, ev := range leader.FSM().Events(0, fsm.MaxPageSize).Events {
			if ev.Type == fsm.EventWorkerUnreachable && ev.WorkerID == "busy" {
				return true
			}
		}
		return false
	})
	ws = workersByID(t, viaFollower, pb.Consistency_CONSISTENCY_LINEARIZABLE)
	if b := ws["busy"]; b.GetState() != pb.WorkerState_WORKER_STATE_UNREACHABLE || b.GetSilence().AsDuration() <= clustertest.Grace ||
		b.GetLeaseCount() != 1 {
		t.Fatalf("silent past grace: %v, silence %v", b.GetState(), b.GetSilence().AsDuration())
	}
	if i := ws["idle"]; i.GetState() != pb.WorkerState_WORKER_STATE_ACTIVE || i.GetSilence().AsDuration() > clustertest.Renew {
		t.Fatalf("heard every renew: %v, silence %v", i.GetState(), i.GetSilence().AsDuration())
	}

	// Heard again: active at once.
	beat("busy", &pb.LeaseRef{JobId: "j1", Token: token})
	if b := workersByID(t, viaLeader, pb.Consistency_CONSISTENCY_LINEARIZABLE)["busy"]; b.GetState() != pb.WorkerState_WORKER_STATE_ACTIVE ||
		b.GetSilence().AsDuration() != 0 {
		t.Fatalf("heard again: %v, silence %v", b.GetState(), b.GetSilence().AsDuration())
	}
}

// Deregistration: a worker credential may deregister the workers it names
// (another's is refused, changing nothing), an admin any; the answer names
// the leases ended. Released, their jobs are queued again at once with no
// attempt used; settled as lost, they follow their policy as on expiry.
// A deregistered worker is no longer listed.
func TestDeregisterScopeAndLeases(t *testing.T) {
	c := tokenCluster(t, false)
	leader := c.Leader()
	base := "http://" + leader.APIAddr
	ops := leaseholdv1connect.NewWorkerServiceClient(http.DefaultClient, base, bearer(opsSecret))
	asA := leaseholdv1connect.NewWorkerServiceClient(http.DefaultClient, base, bearer(workerASecret))
	sub := leaseholdv1connect.NewWorkerServiceClient(http.DefaultClient, base, bearer(subSecret))
	jobs := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, base, bearer(subSecret))

	for _, w := range []string{"wA", "wB"} {
		if _, err := ops.RegisterWorker(callCtx(t), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: w, Capacity: 2})); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a1", "a2"} {
		if _, err := jobs.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: id, Queue: "q", Kind: "k"}})); err != nil {
			t.Fatal(err)
		}
	}
	acq, err := asA.Acquire(callCtx(t), connect.NewRequest(&pb.AcquireRequest{WorkerId: "wA", RequestId: "r", Queues: []string{"q"}, Max: 2, Start: true}))
	if err != nil || len(acq.Msg.GetGrants()) != 2 {
		t.Fatalf("acquire as A: %v", err)
	}

	// A submitter reads workers, one or all.
	if _, err := sub.GetWorker(callCtx(t), connect.NewRequest(&pb.GetWorkerRequest{WorkerId: "wA"})); err != nil {
		t.Fatalf("a submitter gets a worker: %v", err)
	}
	// Another worker's credential, and a submitter's, are refused.
	if _, err := asA.DeregisterWorker(callCtx(t), connect.NewRequest(&pb.DeregisterWorkerRequest{WorkerId: "wB"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("A deregisters B: %v", err)
	}
	if _, err := sub.DeregisterWorker(callCtx(t), connect.NewRequest(&pb.DeregisterWorkerRequest{WorkerId: "wA"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("a submitter deregisters A: %v", err)
	}
	if _, err := leader.FSM().Worker("wB"); err != nil {
		t.Fatalf("a refused deregistration removed B: %v", err)
	}

	// Its own: the leases are released, the jobs queued, no attempt used.
	res, err := asA.DeregisterWorker(callCtx(t), connect.NewRequest(&pb.DeregisterWorkerRequest{WorkerId: "wA"}))
	if err != nil {
		t.Fatalf("A deregisters itself: %v", err)
	}
	var released []string
	for _, r := range res.Msg.GetReleased() {
		released = append(released, r.GetJobId())
	}
	slices.Sort(released)
	if !slices.Equal(released, []string{"a1", "a2"}) {
		t.Fatalf("released %v, want a1 and a2", released)
	}
	for _, id := range released {
		j, err := leader.FSM().Job(id)
		if err != nil || j.State != fsm.JobQueued || j.Attempts != 0 {
			t.Fatalf("job %s after its worker's deregistration: %+v %v", id, j, err)
		}
	}
	if _, err := ops.GetWorker(callCtx(t), connect.NewRequest(&pb.GetWorkerRequest{WorkerId: "wA"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a deregistered worker: %v", err)
	}
	// An admin deregisters any worker; as lost, its run-style job ends
	// lost (a loss, no attempt), its evaluation is queued again.
	for _, spec := range []*pb.JobSpec{{Id: "b-run", Queue: "qb", Kind: "run"}, {Id: "b-eval", Queue: "qb", Kind: "evaluation"}} {
		if _, err := jobs.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: spec})); err != nil {
			t.Fatal(err)
		}
	}
	if acq, err := ops.Acquire(callCtx(t), connect.NewRequest(&pb.AcquireRequest{WorkerId: "wB", RequestId: "rb", Queues: []string{"qb"}, Max: 2})); err != nil || len(acq.Msg.GetGrants()) != 2 {
		t.Fatalf("acquire as B: %v", err)
	}
	res, err = ops.DeregisterWorker(callCtx(t), connect.NewRequest(&pb.DeregisterWorkerRequest{WorkerId: "wB", Lost: true}))
	if err != nil || len(res.Msg.GetReleased()) != 2 {
		t.Fatalf("admin deregisters B as lost: %v %v", res, err)
	}
	for id, want := range map[string]fsm.JobState{"b-run": fsm.JobLost, "b-eval": fsm.JobQueued} {
		if j, err := leader.FSM().Job(id); err != nil || j.State != want || j.Losses != 1 || j.Attempts != 0 {
			t.Fatalf("job %s after its worker was deregistered as lost: %+v %v, want %s", id, j, err, want)
		}
	}
	if ws := workersByID(t, ops, pb.Consistency_CONSISTENCY_LINEARIZABLE); len(ws) != 0 {
		t.Fatalf("still listed: %v", ws)
	}
}

// Presence is the leader's memory, and a new leader starts it afresh: a
// lease holder counts as heard at the takeover (active), an idle worker
// it has not heard is unknown until the leader has been in office past
// grace, then unreachable, like the silent holder.
func TestWorkerPresenceAfterFailover(t *testing.T) {
	c := clustertest.New(t, 3)
	old := c.Leader()
	holding(t, old, "", "holder", "h1")
	idle := workersOf(t, old, "")
	if _, err := idle.RegisterWorker(callCtx(t), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: "idle", Capacity: 1})); err != nil {
		t.Fatal(err)
	}
	next := c.Nodes[(old.Index+1)%3]
	c.WaitFor(10*time.Second, "the next leader has both workers", func() bool { return len(next.FSM().Workers()) == 2 })
	c.Transfer(old, next)
	leader := c.Leader()
	if leader != next {
		t.Fatalf("leadership went to %s, not %s", leader.ID(), next.ID())
	}
	viaLeader := workersOf(t, leader, "")
	ws := workersByID(t, viaLeader, pb.Consistency_CONSISTENCY_LINEARIZABLE)
	if h := ws["holder"]; h.GetState() != pb.WorkerState_WORKER_STATE_ACTIVE || h.GetSilence() == nil || h.GetLeaseCount() != 1 {
		t.Fatalf("a holder after the takeover: %v", h)
	}
	if i := ws["idle"]; i.GetState() != pb.WorkerState_WORKER_STATE_UNKNOWN || i.GetSilence() != nil {
		t.Fatalf("an idle worker the new leader has not heard: %v", i)
	}
	c.Run(leader.Index, clustertest.Grace+clustertest.Renew)
	c.WaitFor(10*time.Second, "the holder announced unreachable by the new leader", func() bool {
		for _, ev := range leader.FSM().Events(0, fsm.MaxPageSize).Events {
			if ev.Type == fsm.EventWorkerUnreachable && ev.WorkerID == "holder" {
				return true
			}
		}
		return false
	})
	ws = workersByID(t, viaLeader, pb.Consistency_CONSISTENCY_LINEARIZABLE)
	for _, id := range []string{"holder", "idle"} {
		if w := ws[id]; w.GetState() != pb.WorkerState_WORKER_STATE_UNREACHABLE {
			t.Fatalf("%s silent past grace of the new leader's office: %v", id, w.GetState())
		}
	}
	if ws["idle"].GetSilence() != nil || ws["holder"].GetSilence().AsDuration() <= clustertest.Grace {
		t.Fatalf("silences: idle %v (never heard by this leader), holder %v", ws["idle"].GetSilence(), ws["holder"].GetSilence())
	}
}
