package api_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// Progress notes: a heartbeat's note for a live lease shows in GetJob from
// the leader (never in a follower's stale read); a note for a token that
// is not the job's live lease is ignored; a note is dropped when its lease
// ends.
func TestProgressNotes(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	refs := holding(t, leader, "", "w1", "a", "b")
	ws := workersOf(t, leader, "")
	js := leaseholdv1connect.NewJobServiceClient(h2c(t), "http://"+leader.APIAddr)
	beat := func(worker string, leases []*pb.LeaseRef, notes ...*pb.ProgressNote) *pb.HeartbeatResponse {
		t.Helper()
		r, err := ws.Heartbeat(callCtx(t), connect.NewRequest(&pb.HeartbeatRequest{WorkerId: worker, Leases: leases, Notes: notes}))
		if err != nil {
			t.Fatalf("heartbeat of %s: %v", worker, err)
		}
		return r.Msg
	}
	progress := func(js leaseholdv1connect.JobServiceClient, id string, c pb.Consistency) *pb.Job {
		t.Helper()
		r, err := js.GetJob(callCtx(t), connect.NewRequest(&pb.GetJobRequest{Id: id, Consistency: c}))
		if err != nil {
			t.Fatalf("get job %s: %v", id, err)
		}
		return r.Msg.GetJob()
	}

	before := time.Now()
	term := leader.Status().Term
	if r := beat("w1", refs, &pb.ProgressNote{Token: refs[0].GetToken(), Note: "step 1 of 3"}); r.GetNotesTerm() != term {
		t.Fatalf("answer %v does not say notes are held by term %d", r, term)
	}
	j := progress(js, "a", pb.Consistency_CONSISTENCY_LINEARIZABLE)
	if j.GetProgress() != "step 1 of 3" || j.GetProgressAt().AsTime().Before(before.Add(-time.Minute)) {
		t.Fatalf("job a: progress %q at %v, want step 1 of 3 heard now", j.GetProgress(), j.GetProgressAt())
	}
	if j := progress(js, "b", pb.Consistency_CONSISTENCY_LINEARIZABLE); j.GetProgress() != "" || j.GetProgressAt() != nil {
		t.Fatalf("job b has progress %q without a note", j.GetProgress())
	}

	// The latest note wins, on a stream as in a call.
	s := openBeats(t, leader, "")
	if err := s.Send(&pb.HeartbeatStreamRequest{Seq: 1, Heartbeat: &pb.HeartbeatRequest{WorkerId: "w1", Leases: refs,
		Notes: []*pb.ProgressNote{{Token: refs[0].GetToken(), Note: "step 2 of 3"}}}}); err != nil {
		t.Fatal(err)
	}
	if r := ack(t, s, 1); r.GetNotesTerm() != term {
		t.Fatalf("stream answer %v does not say notes are held by term %d", r, term)
	}
	if j := progress(js, "a", pb.Consistency_CONSISTENCY_LINEARIZABLE); j.GetProgress() != "step 2 of 3" {
		t.Fatalf("job a: progress %q, want the latest note", j.GetProgress())
	}
	// A follower's stale read has no note: notes live in the leader's memory.
	f := c.Nodes[(leader.Index+1)%3]
	fjs := leaseholdv1connect.NewJobServiceClient(h2c(t), "http://"+f.APIAddr)
	if j := progress(fjs, "a", pb.Consistency_CONSISTENCY_STALE); j.GetProgress() != "" || j.GetProgressAt() != nil {
		t.Fatalf("a follower's stale read shows progress %q", j.GetProgress())
	}

	// b's lease ends and w2 takes the job: w1's note under its old token is
	// ignored, w2's under the live one shows.
	old := refs[1].GetToken()
	if _, err := ws.Release(callCtx(t), connect.NewRequest(&pb.ReleaseRequest{WorkerId: "w1", JobId: "b", Token: old})); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.RegisterWorker(callCtx(t), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: "w2", Capacity: 1})); err != nil {
		t.Fatal(err)
	}
	g, err := ws.Acquire(callCtx(t), connect.NewRequest(&pb.AcquireRequest{WorkerId: "w2", RequestId: "r-w2", Queues: []string{"q-w1"}, Start: true}))
	if err != nil || len(g.Msg.GetGrants()) != 1 || g.Msg.GetGrants()[0].GetLease().GetJobId() != "b" {
		t.Fatalf("w2's acquire: %v, %v", g, err)
	}
	live := g.Msg.GetGrants()[0].GetLease().GetToken()
	r := beat("w1", refs[1:], &pb.ProgressNote{Token: old, Note: "stale"})
	if v := r.GetLeases()[0].GetVerdict(); v != pb.Verdict_VERDICT_LOST {
		t.Fatalf("w1's ended lease answered %v", v)
	}
	if _, ok := leader.Progress("b", old); ok {
		t.Fatal("the leader kept a note for a lease that had ended")
	}
	if j := progress(js, "b", pb.Consistency_CONSISTENCY_LINEARIZABLE); j.GetProgress() != "" {
		t.Fatalf("job b shows %q, a note for an ended lease", j.GetProgress())
	}
	beat("w2", []*pb.LeaseRef{{JobId: "b", Token: live}}, &pb.ProgressNote{Token: live, Note: "w2 at work"})
	if j := progress(js, "b", pb.Consistency_CONSISTENCY_LINEARIZABLE); j.GetProgress() != "w2 at work" {
		t.Fatalf("job b shows %q, want w2's note", j.GetProgress())
	}

	// a is reported: its note goes with its lease (at the leader's next
	// sweep, within grace/2), and the job shows none.
	if _, err := ws.Report(callCtx(t), connect.NewRequest(&pb.ReportRequest{WorkerId: "w1", JobId: "a", Token: refs[0].GetToken(),
		ReportId: "rep-a", Outcome: pb.Outcome_OUTCOME_SUCCEEDED})); err != nil {
		t.Fatal(err)
	}
	if j := progress(js, "a", pb.Consistency_CONSISTENCY_LINEARIZABLE); j.GetProgress() != "" {
		t.Fatalf("reported job a shows %q", j.GetProgress())
	}
	c.Run(leader.Index, clustertest.Grace/2+c.Tick(leader.Index))
	if _, ok := leader.Progress("a", refs[0].GetToken()); ok {
		t.Fatal("the note of a's ended lease is still kept")
	}
	// An empty note clears one.
	beat("w2", []*pb.LeaseRef{{JobId: "b", Token: live}}, &pb.ProgressNote{Token: live})
	if _, ok := leader.Progress("b", live); ok {
		t.Fatal("an empty note did not clear w2's")
	}
}

// A heartbeat's notes are checked like any input: a bad one refuses the
// beat with INVALID_ARGUMENT naming the field (RESOURCE_EXHAUSTED for one
// too long, as for any field), on a call and on a stream.
func TestProgressNotesRefused(t *testing.T) {
	c := clustertest.New(t, 1)
	leader := c.Leader()
	refs := holding(t, leader, "", "w1", "a", "b")
	ws := workersOf(t, leader, "")
	tok := refs[0].GetToken()
	for name, notes := range map[string][]*pb.ProgressNote{
		"too long":     {{Token: tok, Note: strings.Repeat("x", 257)}},
		"control":      {{Token: tok, Note: "red \x1b[31m"}},
		"not named":    {{Token: tok + 1000, Note: "x"}},
		"twice":        {{Token: tok, Note: "x"}, {Token: tok, Note: "y"}},
		"more than ls": {{Token: tok, Note: "x"}, {Token: refs[1].GetToken(), Note: "y"}, {Token: tok + 1, Note: "z"}},
	} {
		_, err := ws.Heartbeat(callCtx(t), connect.NewRequest(&pb.HeartbeatRequest{WorkerId: "w1", Leases: refs, Notes: notes}))
		want := connect.CodeInvalidArgument
		if name == "too long" {
			want = connect.CodeResourceExhausted
		}
		if connect.CodeOf(err) != want || !strings.HasPrefix(transport.DetailOf(err).GetField(), "notes") {
			t.Errorf("%s: %v (field %q), want %v naming notes", name, err, transport.DetailOf(err).GetField(), want)
		}
		s := openBeats(t, leader, "")
		_ = s.Send(&pb.HeartbeatStreamRequest{Seq: 1, Heartbeat: &pb.HeartbeatRequest{WorkerId: "w1", Leases: refs, Notes: notes}})
		if m, err := receive(t, s); connect.CodeOf(err) != want {
			t.Errorf("%s on a stream: %v, %v, want %v", name, m, err, want)
		}
	}
	if _, ok := leader.Progress("a", tok); ok {
		t.Fatal("a refused beat left a note")
	}
}

// Notes are the leader's memory of its term: after leadership moves, the
// new leader shows none until the worker sends it again, and its answers
// name the new term, so the worker knows to.
func TestProgressNotesEndWithTheTerm(t *testing.T) {
	c := clustertest.New(t, 3)
	old := c.Leader()
	refs := holding(t, old, "", "w1", "a")
	note := &pb.ProgressNote{Token: refs[0].GetToken(), Note: "half way"}
	r, err := workersOf(t, old, "").Heartbeat(callCtx(t), connect.NewRequest(&pb.HeartbeatRequest{WorkerId: "w1", Leases: refs, Notes: []*pb.ProgressNote{note}}))
	if err != nil {
		t.Fatal(err)
	}
	oldTerm := r.Msg.GetNotesTerm()
	if _, ok := old.Progress("a", note.GetToken()); !ok {
		t.Fatal("the leader did not keep the note")
	}
	next := c.Nodes[(old.Index+1)%3]
	c.Transfer(old, next)
	leader := c.Leader()
	js := leaseholdv1connect.NewJobServiceClient(h2c(t), "http://"+leader.APIAddr)
	var j *pb.GetJobResponse
	c.WaitFor(10*time.Second, "the new leader to answer", func() bool {
		res, err := js.GetJob(callCtx(t), connect.NewRequest(&pb.GetJobRequest{Id: "a"}))
		if err == nil {
			j = res.Msg
		}
		return err == nil
	})
	if p := j.GetJob().GetProgress(); p != "" {
		t.Fatalf("the new leader shows %q, a note it never heard", p)
	}
	if _, ok := old.Progress("a", note.GetToken()); ok {
		t.Fatal("the old leader still answers with its note")
	}
	var again *pb.HeartbeatResponse
	c.WaitFor(10*time.Second, "a heartbeat to reach the new leader", func() bool {
		r, err := workersOf(t, leader, "").Heartbeat(callCtx(t), connect.NewRequest(&pb.HeartbeatRequest{WorkerId: "w1", Leases: refs, Notes: []*pb.ProgressNote{note}}))
		if err == nil {
			again = r.Msg
		}
		return err == nil
	})
	if again.GetNotesTerm() <= oldTerm {
		t.Fatalf("the new leader's answer names term %d, the old one's was %d", again.GetNotesTerm(), oldTerm)
	}
	if _, ok := leader.Progress("a", note.GetToken()); !ok {
		t.Fatal("the new leader did not keep the note sent again")
	}
}
