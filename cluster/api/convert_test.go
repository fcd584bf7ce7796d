package api

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// A timestamp handed out from one allocation reads as timestamppb.New's,
// before 1970 too, and zero is none.
func TestStampsReadAsTimestamps(t *testing.T) {
	times := []int64{0, 1, 999_999_999, 1e9, 1_700_000_000_123_456_789, -1, -999_999_999, -1e9, -1_500_000_001}
	st := make(stamps, 0, 4) // fewer than the times: the rest are allocated alone
	for _, n := range times {
		got, want := st.at(n), ts(n)
		if n != 0 && !want.AsTime().Equal(time.Unix(0, n)) {
			t.Fatalf("ts(%d) = %v", n, want.AsTime())
		}
		if !proto.Equal(got, want) || (n == 0) != (got == nil) {
			t.Errorf("at(%d) = %v, want %v", n, got, want)
		}
	}
}

// jobToProto answers what converting each part on its own gives, in four
// allocations for a job with leases.
func TestJobToProtoInFourAllocations(t *testing.T) {
	base := time.Date(2026, 12, 4, 18, 0, 0, 123, time.UTC).UnixNano()
	j := &fsm.Job{
		JobSpec: fsm.JobSpec{ID: "j1", Queue: "q", Kind: "k", Payload: []byte("p"), Priority: 3, Submitter: "ci",
			MaxAttempts: 5, MaxWorkerLosses: 2},
		Seq: 7, Attempts: 1, Losses: 1, State: fsm.JobRunning, SubmittedAt: base, UpdatedAt: base + 5,
		CreateIndex: 10, ModifyIndex: 12, NotBefore: base + 1, TimeoutMs: 1500,
	}
	j.SetLeases([]fsm.Lease{
		{Token: 4, WorkerID: "w", RequestID: "r1", GrantedAt: base + 2, EndedAt: base + 3, State: fsm.LeaseExpired},
		{Token: 9, WorkerID: "w", RequestID: "r2", GrantedAt: base + 4, StartedAt: base + 6, State: fsm.LeaseActive},
	})
	tsOf := func(n int64) *timestamppb.Timestamp {
		if n == 0 {
			return nil
		}
		return timestamppb.New(time.Unix(0, n))
	}
	want := &pb.Job{
		Spec: &pb.JobSpec{Id: "j1", Queue: "q", Kind: "k", Payload: []byte("p"), Priority: 3, Submitter: "ci",
			MaxAttempts: 5, MaxWorkerLosses: 2, Timeout: durationpb.New(1500 * time.Millisecond)},
		Seq: 7, State: pb.JobState_JOB_STATE_RUNNING, Attempts: j.Executions(), Losses: 1,
		SubmittedAt: tsOf(base), UpdatedAt: tsOf(base + 5), CreateIndex: 10, ModifyIndex: 12, NotBefore: tsOf(base + 1),
	}
	for _, l := range j.Leases() {
		want.Leases = append(want.Leases, &pb.Lease{Token: l.Token, JobId: j.ID, WorkerId: l.WorkerID, RequestId: l.RequestID,
			State: pb.LeaseState(l.State), GrantedAt: tsOf(l.GrantedAt), StartedAt: tsOf(l.StartedAt), EndedAt: tsOf(l.EndedAt)})
	}
	now := time.Unix(0, base)
	if got := jobToProto(j, now); !proto.Equal(got, want) {
		t.Fatalf("jobToProto:\n got %v\nwant %v", got, want)
	}
	for i := range j.Leases() {
		if got := leaseToProto(j.ID, &j.Leases()[i]); !proto.Equal(got, want.Leases[i]) {
			t.Fatalf("leaseToProto:\n got %v\nwant %v", got, want.Leases[i])
		}
	}
	j.TimeoutMs = 0 // its duration is one more
	if allocs := testing.AllocsPerRun(100, func() { jobToProto(j, now) }); allocs > 4 {
		t.Errorf("jobToProto of a job with two leases: %v allocations, want 4", allocs)
	}
	// A retry policy, which most jobs carry (the API's default), is one more.
	j.Retry = &fsm.RetryPolicy{Initial: 1_500_000_001, Max: 3600e9, Multiplier: 2500, Jitter: 10}
	if allocs := testing.AllocsPerRun(100, func() { jobToProto(j, now) }); allocs > 5 {
		t.Errorf("jobToProto of a job with two leases and a retry policy: %v allocations, want 5", allocs)
	}
}

// retryToProto, in one allocation, answers what durationpb gives, for
// every duration (a policy's are positive; the conversion does not rely on it).
func TestRetryToProtoReadsAsDurations(t *testing.T) {
	for _, d := range []int64{0, 1, 999_999_999, 1e9, 1_500_000_001, 3600e9, math.MaxInt64, -1, -1_500_000_001, math.MinInt64} {
		p := &fsm.RetryPolicy{Initial: d, Max: d / 3, Multiplier: 1500, Jitter: 25}
		want := &pb.RetryPolicy{Initial: durationpb.New(time.Duration(d)), Max: durationpb.New(time.Duration(d / 3)),
			Multiplier: 1.5, Jitter: 0.25}
		if got := retryToProto(p); !proto.Equal(got, want) {
			t.Errorf("retryToProto(%+v) = %v, want %v", p, got, want)
		}
	}
	if retryToProto(nil) != nil {
		t.Error("no policy converted to one")
	}
}
