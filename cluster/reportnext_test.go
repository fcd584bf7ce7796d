package cluster_test

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// reportNextCount reads leasehold_report_next_total{acquire=how} on n.
func reportNextCount(t *testing.T, n *clustertest.Node, how string) float64 {
	t.Helper()
	m := labelled(t, n, "leasehold_report_next_total", "acquire", how)
	if m == nil {
		t.Fatalf("no leasehold_report_next_total{acquire=%q}", how)
	}
	return m.GetCounter().GetValue()
}

// A report of a live lease with a job ready for the slot it frees has its
// acquire proposed right behind it (one commit for both, counted
// "behind"); the report applies first, so a worker of capacity 1 gets the
// next job. With nothing ready, the acquire runs after the report and
// grants nothing ("after"). A refused report (another report of a reported lease) makes no acquire ("none"), even
// with a job ready. Every grant is above the last.
func TestReportNextProposesTheAcquireBehind(t *testing.T) {
	c := clustertest.New(t, 3)
	n := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1})
	for _, id := range []string{"a", "b"} {
		do(t, c, &fsm.SubmitJob{Spec: fsm.JobSpec{ID: id, Queue: "q", Kind: "k", MaxAttempts: 1, MaxWorkerLosses: 3, OnWorkerLost: fsm.LostRequeue}})
	}
	res, err := n.Acquire(ctx(t), fsm.Acquire{WorkerID: "w", RequestID: "r0", Queues: []string{"q"}, Max: 1, Start: true}, 0)
	if err != nil || len(res.Grants) != 1 {
		t.Fatalf("acquire a: %+v %v", res, err)
	}
	a := res.Grants[0].Lease

	next := func(id string) fsm.Acquire {
		return fsm.Acquire{WorkerID: "w", RequestID: id, Queues: []string{"q"}, Max: 1, Start: true}
	}
	r, got, err := n.ReportNext(ctx(t), &fsm.Report{WorkerID: "w", JobID: "a", Token: a.Token, ReportID: "rep-a",
		Outcome: fsm.OutcomeSucceeded}, next("r1"), 0)
	if err != nil || r.State != fsm.JobReported || len(got.Grants) != 1 || got.Grants[0].Job.ID != "b" {
		t.Fatalf("report a, next: %+v, %+v, %v; want a reported and b granted", r, got, err)
	}
	b := got.Grants[0].Lease
	if b.Token <= a.Token {
		t.Fatalf("b's token %d is not above a's %d", b.Token, a.Token)
	}
	if behind := reportNextCount(t, n, "behind"); behind != 1 {
		t.Fatalf("behind %v, want 1: the acquire waited for the report", behind)
	}

	r, got, err = n.ReportNext(ctx(t), &fsm.Report{WorkerID: "w", JobID: "b", Token: b.Token, ReportID: "rep-b",
		Outcome: fsm.OutcomeSucceeded}, next("r2"), 0)
	if err != nil || r.State != fsm.JobReported || len(got.Grants) != 0 {
		t.Fatalf("report b, next, nothing ready: %+v, %+v, %v", r, got, err)
	}
	if after := reportNextCount(t, n, "after"); after != 1 {
		t.Fatalf("after %v, want 1", after)
	}

	do(t, c, &fsm.SubmitJob{Spec: fsm.JobSpec{ID: "c", Queue: "q", Kind: "k", MaxAttempts: 1, MaxWorkerLosses: 3, OnWorkerLost: fsm.LostRequeue}})
	_, _, err = n.ReportNext(ctx(t), &fsm.Report{WorkerID: "w", JobID: "b", Token: b.Token, ReportID: "rep-b2",
		Outcome: fsm.OutcomeFailed}, next("r3"), 0)
	if !errors.Is(err, fsm.ErrConflict) {
		t.Fatalf("another report of b: %v, want a conflict", err)
	}
	if none := reportNextCount(t, n, "none"); none != 1 {
		t.Fatalf("none %v, want 1", none)
	}
	if j, _ := n.FSM().Job("c"); j.State != fsm.JobQueued {
		t.Fatalf("c is %v after a refused report: an acquire was made", j.State)
	}
}
