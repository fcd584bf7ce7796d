package history_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Many goroutines record at once: every line lands whole, numbered in
// order, each complete after its invoke, and the file reads back equal to
// the in-memory copy.
func TestRecorderConcurrentRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	const workers, calls = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			proc := fmt.Sprintf("w%d", w)
			for c := range calls {
				id := rec.Invoke(proc, history.OpFenceCheck, history.Input{JobID: "j", Token: uint64(c + 1)})
				out := &history.Output{CurrentToken: uint64(c + 1), Current: true, State: history.JobRunning}
				if err := rec.Complete(id, history.StatusOK, "", out); err != nil {
					t.Errorf("Complete: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if err := rec.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	mem := rec.Entries()
	if len(mem) != 2*workers*calls {
		t.Fatalf("%d entries, want %d", len(mem), 2*workers*calls)
	}
	for i, e := range mem {
		if e.Seq != int64(i+1) {
			t.Fatalf("entry %d has seq %d", i, e.Seq)
		}
	}
	read, err := history.Read(&buf)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !reflect.DeepEqual(read, mem) {
		t.Fatalf("read back differs from memory")
	}
	ops, err := history.Operations(read)
	if err != nil {
		t.Fatalf("Operations: %v", err)
	}
	if len(ops) != workers*calls || rec.Pending() != 0 {
		t.Fatalf("%d ops, %d pending", len(ops), rec.Pending())
	}
	for _, op := range ops {
		if op.Status != history.StatusOK || op.CompleteNs < op.InvokeNs {
			t.Fatalf("op %+v", op)
		}
	}
}

// A runner killed mid-line leaves a cut last line: Read keeps everything
// before it and says so.
func TestReadTruncatedLastLine(t *testing.T) {
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	for range 3 {
		if err := rec.Append(history.Entry{Kind: history.KindHeal}); err != nil {
			t.Fatal(err)
		}
	}
	cut := buf.Bytes()[:buf.Len()-10]
	got, err := history.Read(bytes.NewReader(cut))
	if !errors.Is(err, history.ErrTruncated) {
		t.Fatalf("err %v, want ErrTruncated", err)
	}
	if len(got) != 2 {
		t.Fatalf("%d entries before the cut, want 2", len(got))
	}
	// Without the final newline but whole, the line counts.
	whole := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if got, err := history.Read(bytes.NewReader(whole)); err != nil || len(got) != 3 {
		t.Fatalf("%d entries, err %v", len(got), err)
	}
}

func TestReadRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       error
	}{
		{"unknown kind", `{"kind":"teleport","ns":5}`, history.ErrUnknownKind},
		{"unknown field", `{"kind":"heal","ns":5,"invoke_ns":3}`, history.ErrMalformed},
		{"no time", `{"kind":"heal"}`, history.ErrInvalidEntry},
		{"fail without reason", `{"kind":"complete","ns":5,"process":"c","op":{"op_id":1,"op":"report","status":"fail"}}`, history.ErrInvalidEntry},
		{"bad status", `{"kind":"complete","ns":5,"process":"c","op":{"op_id":1,"op":"report","status":"maybe"}}`, history.ErrInvalidEntry},
		{"two payloads", `{"kind":"heal","ns":5,"marker":{},"exec":{"job_id":"j","token":1,"worker_id":"w"}}`, history.ErrInvalidEntry},
		{"wrong payload", `{"kind":"exec_start","ns":5,"sink":{"sink":"fenced","job_id":"j","token":1,"accepted":true}}`, history.ErrInvalidEntry},
		{"stop without cause", `{"kind":"exec_stop","ns":5,"exec":{"job_id":"j","token":1,"worker_id":"w"}}`, history.ErrInvalidEntry},
		{"other sink", `{"kind":"sink_write","ns":5,"sink":{"sink":"maybe","job_id":"j","token":1,"accepted":true}}`, history.ErrInvalidEntry},
		{"future format", `{"kind":"run","ns":5,"run":{"format":99}}`, history.ErrFormat},
		{"not json", "{\"kind\":\n", history.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := history.Read(strings.NewReader(tc.line + "\n"))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), "line 1") {
				t.Fatalf("err %v does not name the line", err)
			}
		})
	}
}

// One valid entry of every kind passes Validate, and Kinds lists them all.
func TestEveryKindValidates(t *testing.T) {
	op := &history.Op{ID: 1, Name: history.OpSubmit}
	done := &history.Op{ID: 1, Name: history.OpSubmit, Status: history.StatusOK}
	exec := &history.Exec{JobID: "j", Token: 1, WorkerID: "w"}
	stop := &history.Exec{JobID: "j", Token: 1, WorkerID: "w", Cause: history.CauseCompleted}
	entries := map[history.Kind]history.Entry{
		history.KindRun:           {Run: &history.Run{Format: history.FormatVersion}},
		history.KindRunEnd:        {RunEnd: &history.RunEnd{EventsComplete: true}},
		history.KindInvoke:        {Process: "c", Op: op},
		history.KindComplete:      {Process: "c", Op: done},
		history.KindExecStart:     {Exec: exec},
		history.KindExecStop:      {Exec: stop},
		history.KindSinkWrite:     {Sink: &history.SinkWrite{Sink: history.SinkFenced, JobID: "j", Token: 1}},
		history.KindFaultStart:    {Fault: &history.Fault{ID: "f1", Type: "kill-9"}},
		history.KindFaultStop:     {Fault: &history.Fault{ID: "f1"}},
		history.KindFinalState:    {Final: &history.FinalState{Node: "n1"}},
		history.KindClusterEvent:  {Event: &history.ClusterEvent{Seq: 1, Type: history.EventLeaseExpired}},
		history.KindHeal:          {},
		history.KindLeaderElected: {Marker: &history.Marker{Node: "n1"}},
		history.KindWorkerGone:    {Marker: &history.Marker{WorkerID: "w"}},
		history.KindOutsiderAttempt: {Attempt: &history.Attempt{Attack: history.AttackJoinStranger, Node: "n1",
			Via: history.ViaTCP}},
		history.KindOutsiderCapture: {Capture: &history.Capture{From: "10.0.0.1:1", Count: 1}},
		history.KindNodeReady:       {Marker: &history.Marker{Node: "n1"}},
		history.KindFloodCall:       {Flood: &history.FloodCall{Attack: history.FloodGzipBomb, Node: "n1", Cred: history.CredValid}},
	}
	for _, k := range history.Kinds() {
		e, ok := entries[k]
		if !ok {
			t.Fatalf("kind %s has no test entry", k)
		}
		e.Kind, e.Ns = k, 1
		if err := e.Validate(); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if len(entries) != len(history.Kinds()) {
		t.Fatalf("test covers %d kinds, Kinds lists %d", len(entries), len(history.Kinds()))
	}
}

func TestRecorderRefuses(t *testing.T) {
	rec := history.NewRecorder(nil)
	if err := rec.Append(history.Entry{Kind: history.KindInvoke, Process: "c", Op: &history.Op{ID: 1, Name: "x"}}); !errors.Is(err, history.ErrNotAppendable) {
		t.Fatalf("Append(invoke): %v", err)
	}
	if err := rec.Append(history.Entry{Kind: history.KindExecStart, Exec: &history.Exec{JobID: "j"}}); !errors.Is(err, history.ErrInvalidEntry) {
		t.Fatalf("Append(bad exec): %v", err)
	}
	if err := rec.Complete(42, history.StatusOK, "", nil); !errors.Is(err, history.ErrUnknownOp) {
		t.Fatalf("Complete(unknown): %v", err)
	}
	id := rec.Invoke("c", history.OpReport, history.Input{})
	if err := rec.Complete(id, history.StatusFail, "", nil); !errors.Is(err, history.ErrInvalidEntry) {
		t.Fatalf("Complete(fail, no reason): %v", err)
	}
	if rec.Pending() != 1 {
		t.Fatalf("a refused complete must leave the op pending")
	}
	if got := len(rec.Entries()); got != 1 {
		t.Fatalf("%d entries recorded, want only the invoke", got)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// A write error is kept for Err, and recording goes on in memory.
func TestRecorderWriteErrorIsSticky(t *testing.T) {
	rec := history.NewRecorder(failingWriter{})
	for range 2 {
		if err := rec.Append(history.Entry{Kind: history.KindHeal}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Err(); err == nil || !strings.Contains(err.Error(), "entry 1") {
		t.Fatalf("Err: %v", err)
	}
	if len(rec.Entries()) != 2 {
		t.Fatalf("entries lost")
	}
}

func TestOperationsPairing(t *testing.T) {
	inv := func(proc string, id uint64, ns int64) history.Entry {
		return history.Entry{Kind: history.KindInvoke, Ns: ns, Process: proc, Op: &history.Op{ID: id, Name: history.OpReport}}
	}
	done := func(proc string, id uint64, ns int64) history.Entry {
		return history.Entry{Kind: history.KindComplete, Ns: ns, Process: proc,
			Op: &history.Op{ID: id, Name: history.OpReport, Status: history.StatusOK}}
	}
	// Same op id in two processes: two ops. No complete: info, forever.
	ops, err := history.Operations([]history.Entry{inv("a", 1, 10), inv("b", 1, 11), done("b", 1, 12)})
	if err != nil {
		t.Fatal(err)
	}
	if ops[0].Status != history.StatusInfo || ops[0].CompleteNs != math.MaxInt64 || ops[0].CompleteIndex != -1 {
		t.Fatalf("pending op %+v", ops[0])
	}
	if ops[0].EffectByNs() != math.MaxInt64 || ops[1].EffectByNs() != 12 {
		t.Fatalf("EffectByNs %d, %d", ops[0].EffectByNs(), ops[1].EffectByNs())
	}
	if _, err := history.Operations([]history.Entry{done("a", 1, 5)}); !errors.Is(err, history.ErrUnpaired) {
		t.Fatalf("complete without invoke: %v", err)
	}
	if _, err := history.Operations([]history.Entry{inv("a", 1, 5), inv("a", 1, 6)}); !errors.Is(err, history.ErrUnpaired) {
		t.Fatalf("op invoked twice: %v", err)
	}
	if _, err := history.Operations([]history.Entry{inv("a", 1, 5), done("a", 1, 6), done("a", 1, 7)}); !errors.Is(err, history.ErrUnpaired) {
		t.Fatalf("op completed twice: %v", err)
	}
}

func TestNowIsMonotonic(t *testing.T) {
	prev := history.Now()
	if prev <= 0 {
		t.Fatalf("Now() = %d", prev)
	}
	for range 1000 {
		now := history.Now()
		if now < prev {
			t.Fatalf("Now went back: %d after %d", now, prev)
		}
		prev = now
	}
}

func TestClassify(t *testing.T) {
	retryErr := fmt.Errorf("gave up: %w", errors.Join(context.DeadlineExceeded, &client.Error{Reason: transport.ReasonNotLeader}))
	// The client retries DISK_FULL elsewhere: one that reaches the caller
	// as the last error of a call whose time ran out says nothing of the
	// attempts before it.
	diskFullRetried := fmt.Errorf("gave up: %w", errors.Join(context.DeadlineExceeded,
		&client.Error{Reason: transport.ReasonDiskFull, Code: connect.CodeResourceExhausted, NodeID: "n2"}))
	for _, tc := range []struct {
		name   string
		err    error
		status history.Status
		reason string
	}{
		{"nil", nil, history.StatusOK, ""},
		{"stale", &client.Error{Reason: transport.ReasonStaleToken, Code: connect.CodeFailedPrecondition}, history.StatusFail, "STALE_TOKEN"},
		{"conflict wrapped", fmt.Errorf("report: %w", &client.Error{Reason: transport.ReasonConflict}), history.StatusFail, "CONFLICT"},
		{"outcome unknown", &client.Error{Reason: transport.ReasonOutcomeUnknown}, history.StatusInfo, "OUTCOME_UNKNOWN"},
		{"server timeout", &client.Error{Reason: transport.ReasonTimeout}, history.StatusInfo, "TIMEOUT"},
		// A single attempt answered DISK_FULL was never stored (on the
		// leader its append failed; a follower never forwarded it).
		{"disk full", &client.Error{Reason: transport.ReasonDiskFull, Code: connect.CodeResourceExhausted, NodeID: "n1"}, history.StatusFail, "DISK_FULL"},
		{"disk full, then out of time", diskFullRetried, history.StatusInfo, "TIMEOUT"},
		{"quota", &client.Error{Reason: transport.ReasonQuotaExceeded, Code: connect.CodeResourceExhausted}, history.StatusFail, "QUOTA_EXCEEDED"},
		{"context ended while retrying", retryErr, history.StatusInfo, "TIMEOUT"},
		{"cancelled", context.Canceled, history.StatusInfo, "CANCELED"},
		{"connection lost", &client.Error{Code: connect.CodeUnavailable}, history.StatusInfo, "UNAVAILABLE"},
		{"closed", client.ErrClosed, history.StatusInfo, "CLOSED"},
		{"stranger", errors.New("boom"), history.StatusInfo, "UNKNOWN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, reason := history.Classify(tc.err)
			if status != tc.status || reason != tc.reason {
				t.Fatalf("Classify = %s %q, want %s %q", status, reason, tc.status, tc.reason)
			}
		})
	}
}

func TestCompleteErr(t *testing.T) {
	rec := history.NewRecorder(nil)
	id := rec.Invoke("w1", history.OpReport, history.Input{JobID: "j", Token: 3})
	if err := rec.CompleteErr(id, &client.Error{Reason: transport.ReasonStaleToken}, &history.Output{State: history.JobReported}); err != nil {
		t.Fatal(err)
	}
	e := rec.Entries()[1]
	if e.Op.Status != history.StatusFail || e.Op.Reason != "STALE_TOKEN" || e.Op.Output != nil {
		t.Fatalf("complete %+v", e.Op)
	}
}

func TestJobSummaryOf(t *testing.T) {
	now := timestamppb.Now()
	j := &leaseholdv1.Job{
		Spec: &leaseholdv1.JobSpec{Id: "j1"}, State: leaseholdv1.JobState_JOB_STATE_RUNNING, Attempts: 1,
		Leases: []*leaseholdv1.Lease{
			{Token: 4, WorkerId: "w1", State: leaseholdv1.LeaseState_LEASE_STATE_REPORTED, ReportId: "r1",
				Outcome: leaseholdv1.Outcome_OUTCOME_FAILED, Retryable: true, StartedAt: now},
			{Token: 9, WorkerId: "w2", State: leaseholdv1.LeaseState_LEASE_STATE_ACTIVE, Revoke: leaseholdv1.Revoke_REVOKE_KILL},
		},
	}
	got := history.JobSummaryOf(j)
	want := history.JobSummary{
		ID: "j1", State: history.JobRunning, Tokens: []uint64{4, 9}, CurrentToken: 9, Outcome: history.OutcomeFailed, Attempts: 1,
		Leases: []history.Lease{
			{Token: 4, WorkerID: "w1", State: history.LeaseReported, Started: true, ReportID: "r1", Outcome: history.OutcomeFailed, Retryable: true},
			{Token: 9, WorkerID: "w2", State: history.LeaseActive, Revoke: history.RevokeKill},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("JobSummaryOf:\n got %+v\nwant %+v", got, want)
	}
	if history.JobStateOf(leaseholdv1.JobState_JOB_STATE_SCHEDULED) != history.JobQueued {
		t.Error("a scheduled job is recorded as what the cluster stores: queued")
	}
	if history.JobStateOf(leaseholdv1.JobState_JOB_STATE_UNSPECIFIED) != "" || history.RevokeOf(leaseholdv1.Revoke_REVOKE_NONE) != "" {
		t.Fatalf("unspecified values must name nothing")
	}
	v := history.VerdictsOf(&leaseholdv1.HeartbeatResponse{Leases: []*leaseholdv1.LeaseStatus{
		{JobId: "j1", Token: 9, Verdict: leaseholdv1.Verdict_VERDICT_LOST},
	}})
	if len(v) != 1 || v[0].Verdict != history.VerdictLost {
		t.Fatalf("VerdictsOf %+v", v)
	}
}

func TestHashJobsIgnoresListingOrder(t *testing.T) {
	a := history.JobSummary{ID: "a", State: history.JobQueued, Tokens: []uint64{}}
	b := history.JobSummary{ID: "b", State: history.JobReported, Tokens: []uint64{3}}
	if history.HashJobs(3, []history.JobSummary{a, b}) != history.HashJobs(3, []history.JobSummary{b, a}) {
		t.Fatalf("order changed the hash")
	}
	if history.HashJobs(3, []history.JobSummary{a, b}) == history.HashJobs(4, []history.JobSummary{a, b}) {
		t.Fatalf("last token not hashed")
	}
	b.State = history.JobLost
	if history.HashJobs(3, []history.JobSummary{a}) == history.HashJobs(3, []history.JobSummary{a, b}) {
		t.Fatalf("a job more, same hash")
	}
}
