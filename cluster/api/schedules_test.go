package api_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// TestScheduleService: a submitter creates, reads, pauses, resumes and
// deletes its schedule through a follower; another submitter may read it
// but not change it; a bad expression or zone is INVALID_ARGUMENT naming
// the field.
func TestScheduleService(t *testing.T) {
	c := tokenCluster(t, false)
	leader := c.Leader()
	follower := c.Nodes[(leader.Index+1)%3]
	ci := leaseholdv1connect.NewScheduleServiceClient(http.DefaultClient, "http://"+follower.APIAddr, bearer(subSecret))
	ci2 := leaseholdv1connect.NewScheduleServiceClient(http.DefaultClient, "http://"+leader.APIAddr, bearer(ci2Secret))

	req := &pb.CreateScheduleRequest{Name: "nightly", Cron: "0 2 * * *", TimeZone: "Europe/Paris",
		Template: &pb.JobSpec{Queue: "batch", Kind: "report", Payload: []byte("{}")}}
	res, err := ci.CreateSchedule(callCtx(t), connect.NewRequest(req))
	if err != nil || !res.Msg.GetCreated() {
		t.Fatalf("create: %v %v", res, err)
	}
	sc := res.Msg.GetSchedule()
	if sc.GetTemplate().GetSubmitter() != "ci" || sc.GetMissed() != pb.MissedSlots_MISSED_SLOTS_SKIP || len(sc.GetNextSlots()) != 3 ||
		sc.GetNextSlots()[0].AsTime().In(mustZone(t, "Europe/Paris")).Hour() != 2 {
		t.Fatalf("created %v", sc)
	}
	// The same again is the same schedule; another definition conflicts.
	if again, err := ci.CreateSchedule(callCtx(t), connect.NewRequest(req)); err != nil || again.Msg.GetCreated() {
		t.Fatalf("create again: %v %v", again, err)
	}
	req.Cron = "0 3 * * *"
	if _, err := ci.CreateSchedule(callCtx(t), connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("another definition: %v", err)
	}

	got, err := ci2.GetSchedule(callCtx(t), connect.NewRequest(&pb.GetScheduleRequest{Name: "nightly"}))
	if err != nil || got.Msg.GetSchedule().GetCron() != "0 2 * * *" {
		t.Fatalf("get: %v %v", got, err)
	}
	if _, err := ci2.PauseSchedule(callCtx(t), connect.NewRequest(&pb.PauseScheduleRequest{Name: "nightly"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("pause another's schedule: %v", err)
	}
	if _, err := ci2.DeleteSchedule(callCtx(t), connect.NewRequest(&pb.DeleteScheduleRequest{Name: "nightly"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("delete another's schedule: %v", err)
	}
	paused, err := ci.PauseSchedule(callCtx(t), connect.NewRequest(&pb.PauseScheduleRequest{Name: "nightly"}))
	if err != nil || !paused.Msg.GetSchedule().GetPaused() || len(paused.Msg.GetSchedule().GetNextSlots()) != 0 {
		t.Fatalf("pause: %v %v", paused, err)
	}
	resumed, err := ci.ResumeSchedule(callCtx(t), connect.NewRequest(&pb.ResumeScheduleRequest{Name: "nightly"}))
	if err != nil || resumed.Msg.GetSchedule().GetPaused() {
		t.Fatalf("resume: %v %v", resumed, err)
	}
	list, err := ci.ListSchedules(callCtx(t), connect.NewRequest(&pb.ListSchedulesRequest{}))
	if err != nil || len(list.Msg.GetSchedules()) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := ci.DeleteSchedule(callCtx(t), connect.NewRequest(&pb.DeleteScheduleRequest{Name: "nightly"})); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := ci.GetSchedule(callCtx(t), connect.NewRequest(&pb.GetScheduleRequest{Name: "nightly"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("get deleted: %v", err)
	}

	for _, bad := range []struct {
		req   *pb.CreateScheduleRequest
		field string
	}{
		{&pb.CreateScheduleRequest{Name: "s", Cron: "61 * * * *", Template: &pb.JobSpec{Queue: "q"}}, "cron"},
		{&pb.CreateScheduleRequest{Name: "s", Cron: "* * * * *", TimeZone: "Mars/Olympus", Template: &pb.JobSpec{Queue: "q"}}, "cron"},
		{&pb.CreateScheduleRequest{Name: "s", Cron: "* * * * *"}, "template"},
		{&pb.CreateScheduleRequest{Name: "s", Cron: "* * * * *", Template: &pb.JobSpec{Id: "x", Queue: "q"}}, "template.id"},
		{&pb.CreateScheduleRequest{Name: "a b", Cron: "* * * * *", Template: &pb.JobSpec{Queue: "q"}}, "name"},
		{&pb.CreateScheduleRequest{Name: "s", Cron: "* * * * *", Template: &pb.JobSpec{Queue: "q"}, Missed: 7}, "missed"},
		// A schedule keeps no timeout: refused, not dropped.
		{&pb.CreateScheduleRequest{Name: "s", Cron: "* * * * *", Template: &pb.JobSpec{Queue: "q", Timeout: durationpb.New(30 * time.Second)}}, "template.timeout"},
		{&pb.CreateScheduleRequest{Name: "s", Cron: "* * * * *", Template: &pb.JobSpec{Queue: "q", Timeout: durationpb.New(time.Nanosecond)}}, "template.timeout"},
		{&pb.CreateScheduleRequest{Name: "s", Cron: "* * * * *", Template: &pb.JobSpec{Queue: "q", Timeout: durationpb.New(-time.Hour)}}, "template.timeout"},
	} {
		_, err := ci.CreateSchedule(callCtx(t), connect.NewRequest(bad.req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || transport.DetailOf(err).GetField() != bad.field {
			t.Errorf("%v: %v, want INVALID_ARGUMENT on %s", bad.req, err, bad.field)
		}
		if bad.field == "template.timeout" && err != nil && !strings.Contains(err.Error(), "a schedule's jobs cannot carry a timeout yet") {
			t.Errorf("template.timeout refused as %v", err)
		}
	}
	// A timeout of 0 is none, as in a submit.
	if _, err := ci.CreateSchedule(callCtx(t), connect.NewRequest(&pb.CreateScheduleRequest{Name: "zero", Cron: "* * * * *",
		Template: &pb.JobSpec{Queue: "q", Timeout: durationpb.New(0)}})); err != nil {
		t.Errorf("a template timeout of 0: %v", err)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// A submitter cannot take a schedule slot's place: a job id of the slot
// form (NAME@<slot, RFC 3339 UTC, to the second>) is refused from clients,
// through a follower too, while ids that only look alike are ordinary.
// When the slot comes, the schedule's own job fires, not a squatter's.
func TestSlotJobIDsAreTheSchedulesOwn(t *testing.T) {
	c := tokenCluster(t, false)
	leader := c.Leader()
	follower := c.Nodes[(leader.Index+1)%3]
	ci := leaseholdv1connect.NewScheduleServiceClient(http.DefaultClient, "http://"+leader.APIAddr, bearer(subSecret))
	res, err := ci.CreateSchedule(callCtx(t), connect.NewRequest(&pb.CreateScheduleRequest{Name: "nightly", Cron: "0 2 * * *",
		Template: &pb.JobSpec{Queue: "batch", Kind: "report", Payload: []byte("{}")}}))
	if err != nil {
		t.Fatal(err)
	}
	slot := res.Msg.GetSchedule().GetNextSlots()[0].AsTime()
	id := fsm.ScheduleJobID("nightly", slot.UnixNano())
	for _, n := range []*clustertest.Node{leader, follower} {
		jobs2 := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, "http://"+n.APIAddr, bearer(ci2Secret))
		for _, squat := range []string{id, fsm.ScheduleJobID("not-yet-a-schedule", slot.UnixNano())} {
			_, err := jobs2.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: squat, Queue: "x", Kind: "y", Payload: []byte("squat")}}))
			if connect.CodeOf(err) != connect.CodeInvalidArgument || transport.DetailOf(err).GetField() != "spec.id" ||
				!strings.Contains(err.Error(), "schedule slot") {
				t.Fatalf("submit %s through %s: %v, want INVALID_ARGUMENT on spec.id", squat, n.ID(), err)
			}
		}
		for _, ok := range []string{"ops@example.com", "nightly@" + slot.Format("2006-01-02T15:04:05.5Z"),
			"nightly@" + slot.In(time.FixedZone("", 3600)).Format(time.RFC3339), "nightly@" + slot.Format("2006-01-02T15:04:05"),
			"a+b@" + slot.Format(time.RFC3339), "@" + slot.Format(time.RFC3339), "nightly@" + slot.Format(time.RFC3339) + "x"} {
			if _, err := jobs2.SubmitJob(callCtx(t), connect.NewRequest(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: ok, Queue: "x", Kind: "y"}})); err != nil {
				t.Fatalf("ordinary id %q through %s: %v", ok, n.ID(), err)
			}
		}
	}
	if _, err := leader.FSM().Job(id); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("the slot's job exists before its slot: %v", err)
	}
	for _, n := range c.Nodes {
		n.Clock.ShiftWall(time.Until(slot.Add(time.Second)) - n.Clock.Wall().Sub(time.Now()))
	}
	c.Step(leader.Index, c.Tick(leader.Index))
	c.WaitFor(10*time.Second, "the slot fired", func() bool {
		sc, err := c.Leader().FSM().Schedule("nightly")
		return err == nil && sc.LastSlot >= slot.UnixNano()
	})
	sc, _ := c.Leader().FSM().Schedule("nightly")
	j, err := c.Leader().FSM().Job(id)
	if sc.Fired != 1 || sc.Skipped != 0 || sc.LastJob != id || err != nil || j.Submitter != "ci" || j.Queue != "batch" {
		t.Fatalf("schedule fired %d skipped %d last %q; job %s: %v submitter %q queue %q, want ci's batch job fired",
			sc.Fired, sc.Skipped, sc.LastJob, id, err, j.Submitter, j.Queue)
	}
}

// ListSchedules leaves each template's payload out (a thousand templates
// of 256 KiB would be one answer of 256 MiB), and says everything else;
// GetSchedule answers the payload.
func TestListSchedulesLeavesPayloadsOut(t *testing.T) {
	c := tokenCluster(t, false)
	leader := c.Leader()
	follower := c.Nodes[(leader.Index+1)%3]
	ci := leaseholdv1connect.NewScheduleServiceClient(http.DefaultClient, "http://"+leader.APIAddr, bearer(subSecret))
	payload := []byte(strings.Repeat("p", 200<<10))
	for _, name := range []string{"a", "b"} {
		if _, err := ci.CreateSchedule(callCtx(t), connect.NewRequest(&pb.CreateScheduleRequest{Name: name, Cron: "0 2 * * *",
			Template: &pb.JobSpec{Queue: "batch", Kind: "report", Priority: 3, Payload: payload}})); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []*clustertest.Node{leader, follower} {
		cl := leaseholdv1connect.NewScheduleServiceClient(http.DefaultClient, "http://"+n.APIAddr, bearer(subSecret))
		list, err := cl.ListSchedules(callCtx(t), connect.NewRequest(&pb.ListSchedulesRequest{}))
		if err != nil || len(list.Msg.GetSchedules()) != 2 {
			t.Fatalf("list through %s: %v %v", n.ID(), list, err)
		}
		for i, sc := range list.Msg.GetSchedules() {
			tm := sc.GetTemplate()
			if sc.GetName() != []string{"a", "b"}[i] || len(tm.GetPayload()) != 0 || tm.GetQueue() != "batch" || tm.GetKind() != "report" ||
				tm.GetPriority() != 3 || tm.GetSubmitter() != "ci" || tm.GetRetry() == nil || len(sc.GetNextSlots()) != 3 {
				t.Fatalf("listed through %s: %v, want the schedule without its payload", n.ID(), sc)
			}
		}
	}
	got, err := ci.GetSchedule(callCtx(t), connect.NewRequest(&pb.GetScheduleRequest{Name: "a"}))
	if err != nil || string(got.Msg.GetSchedule().GetTemplate().GetPayload()) != string(payload) {
		t.Fatalf("get: the payload is not there: %v", err)
	}
}
