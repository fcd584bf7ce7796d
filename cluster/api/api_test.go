package api

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Every error the server can produce maps to its reason and code, with its
// details; and every reason a client can see is produced by something.
func TestErrorReasons(t *testing.T) {
	field := &fsm.FieldError{}
	_, encErr := fsm.Encode(1, &fsm.Start{WorkerID: "w", JobID: "j"})
	if !errors.As(encErr, &field) {
		t.Fatalf("a validation error is not a FieldError: %v", encErr)
	}
	_, bigErr := fsm.Encode(1, &fsm.Acquire{WorkerID: "w", RequestID: "r", Queues: []string{"q"}, Max: fsm.MaxAcquireBatch + 1})
	cases := []struct {
		err    error
		reason string
		code   connect.Code
		check  func(*pb.ErrorDetail) bool
	}{
		{&cluster.NotLeaderError{LeaderID: "n2", LeaderAPI: "h:2"}, transport.ReasonNotLeader, connect.CodeUnavailable,
			func(d *pb.ErrorDetail) bool { return d.GetLeaderId() == "n2" && d.GetLeaderApi() == "h:2" }},
		{&cluster.NotLeaderError{}, transport.ReasonNoLeader, connect.CodeUnavailable, nil},
		{cluster.ErrNotReady, transport.ReasonNotReady, connect.CodeUnavailable, nil},
		{cluster.ErrShutdown, transport.ReasonShuttingDown, connect.CodeUnavailable, nil},
		{fmt.Errorf("x: %w", cluster.ErrLeadershipLost), transport.ReasonOutcomeUnknown, connect.CodeAborted, nil},
		{fmt.Errorf("%w: %w", cluster.ErrTimeout, context.DeadlineExceeded), transport.ReasonTimeout, connect.CodeDeadlineExceeded, nil},
		{context.DeadlineExceeded, transport.ReasonTimeout, connect.CodeDeadlineExceeded, nil},
		{cluster.ErrUnreachable, transport.ReasonUnreachable, connect.CodeFailedPrecondition, nil},
		{encErr, transport.ReasonInvalidArgument, connect.CodeInvalidArgument,
			func(d *pb.ErrorDetail) bool { return d.GetField() == "token" }},
		{bigErr, transport.ReasonTooLarge, connect.CodeResourceExhausted,
			func(d *pb.ErrorDetail) bool { return d.GetField() == "max" }},
		{fsm.ErrNotFound, transport.ReasonNotFound, connect.CodeNotFound, nil},
		{fsm.ErrConflict, transport.ReasonConflict, connect.CodeAlreadyExists, nil},
		{fsm.ErrStaleToken, transport.ReasonStaleToken, connect.CodeFailedPrecondition, nil},
		{fsm.ErrNotOwner, transport.ReasonNotOwner, connect.CodePermissionDenied, nil},
		{fsm.ErrUnknownWorker, transport.ReasonUnknownWorker, connect.CodeFailedPrecondition, nil},
		{fsm.ErrFinished, transport.ReasonJobFinished, connect.CodeFailedPrecondition, nil},
		{fsm.ErrTokensExhausted, transport.ReasonTokensExhausted, connect.CodeResourceExhausted, nil},
		{errUnauthenticated, transport.ReasonUnauthenticated, connect.CodeUnauthenticated, nil},
		{errForbidden, transport.ReasonForbidden, connect.CodePermissionDenied, nil},
		{errors.New("boom"), transport.ReasonInternal, connect.CodeInternal, nil},
		{errRateLimited, transport.ReasonRateLimited, connect.CodeResourceExhausted, nil},
		{cluster.ErrQuotaExceeded, transport.ReasonQuotaExceeded, connect.CodeResourceExhausted, nil},
		{cluster.ErrDiskFull, transport.ReasonDiskFull, connect.CodeResourceExhausted, nil},
		{&cluster.DiskFullError{NodeID: "n3", Err: errors.New("write raft.db: no space left on device")}, transport.ReasonDiskFull,
			connect.CodeResourceExhausted, func(d *pb.ErrorDetail) bool { return d.GetNodeId() == "n3" }},
	}
	produced := map[string]bool{}
	for _, tc := range cases {
		wire := toWire(tc.err)
		var cerr *connect.Error
		if !errors.As(wire, &cerr) || cerr.Code() != tc.code {
			t.Errorf("%v: code %v, want %v", tc.err, cerr.Code(), tc.code)
			continue
		}
		d := transport.DetailOf(wire)
		if d.GetReason() != tc.reason || tc.check != nil && !tc.check(d) {
			t.Errorf("%v: detail %+v, want reason %s", tc.err, d, tc.reason)
		}
		produced[tc.reason] = true
	}
	for _, r := range transport.Reasons() {
		if !produced[r] {
			t.Errorf("reason %s is produced by no error", r)
		}
	}
	if d := transport.DetailOf(toWire(context.Canceled)); d.GetReason() != transport.ReasonShuttingDown {
		t.Error("a request cancelled by the server's shutdown does not send the client elsewhere")
	}
}

func TestRoles(t *testing.T) {
	for _, tc := range []struct {
		role      Role
		procedure string
		want      bool
	}{
		{RoleAdmin, "/leasehold.v1.ClusterService/RemoveNode", true},
		{RoleSubmitter, "/leasehold.v1.JobService/SubmitJob", true},
		{RoleSubmitter, "/leasehold.v1.WorkerService/Acquire", false},
		{RoleSubmitter, "/leasehold.v1.ClusterService/RemoveNode", false},
		{RoleWorker, "/leasehold.v1.WorkerService/Heartbeat", true},
		{RoleWorker, "/leasehold.v1.JobService/CheckFence", true},
		{RoleWorker, "/leasehold.v1.JobService/SubmitJob", false},
		{RoleWorker, "/leasehold.v1.Admin/Snapshot", false},
		{"", "/leasehold.v1.JobService/GetJob", false},
	} {
		if got := allowed(tc.role, tc.procedure); got != tc.want {
			t.Errorf("%s %s: %t, want %t", tc.role, tc.procedure, got, tc.want)
		}
	}
}

// writes are the write requests, one of each, with their translation.
func writes() []struct {
	msg proto.Message
	cmd func(proto.Message) fsm.Command
} {
	type w = struct {
		msg proto.Message
		cmd func(proto.Message) fsm.Command
	}
	return []w{
		{&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "j", Payload: []byte("x"), Kind: "run"}}, func(m proto.Message) fsm.Command { return submitOf(m.(*pb.SubmitJobRequest)) }},
		{&pb.CancelJobRequest{Id: "j", Kill: true}, func(m proto.Message) fsm.Command { return cancelOf(m.(*pb.CancelJobRequest)) }},
		{&pb.CancelSubmitterJobsRequest{Submitter: "s"}, func(m proto.Message) fsm.Command { return cancelSubmitterOf(m.(*pb.CancelSubmitterJobsRequest)) }},
		{&pb.RegisterWorkerRequest{WorkerId: "w", Capacity: 2}, func(m proto.Message) fsm.Command { return registerOf(m.(*pb.RegisterWorkerRequest)) }},
		{&pb.DeregisterWorkerRequest{WorkerId: "w"}, func(m proto.Message) fsm.Command { return deregisterOf(m.(*pb.DeregisterWorkerRequest)) }},
		{&pb.AcquireRequest{WorkerId: "w", RequestId: "r", Queues: []string{"q"}}, func(m proto.Message) fsm.Command { return acquireOf(m.(*pb.AcquireRequest)) }},
		{&pb.StartLeaseRequest{WorkerId: "w", JobId: "j", Token: 1}, func(m proto.Message) fsm.Command { return startOf(m.(*pb.StartLeaseRequest)) }},
		{&pb.ReportRequest{WorkerId: "w", JobId: "j", Token: 1, ReportId: "r", Outcome: pb.Outcome_OUTCOME_SUCCEEDED}, func(m proto.Message) fsm.Command { return reportOf(m.(*pb.ReportRequest)) }},
		{&pb.ReleaseRequest{WorkerId: "w", JobId: "j", Token: 1}, func(m proto.Message) fsm.Command { return releaseOf(m.(*pb.ReleaseRequest)) }},
	}
}

func TestSubmitDefaults(t *testing.T) {
	s := submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Kind: "run"}}).Spec
	if s.Queue != DefaultQueue || s.OnWorkerLost != fsm.LostFail || s.MaxAttempts != DefaultMaxAttempts {
		t.Fatalf("run defaults: %+v", s)
	}
	cmd := submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "b"}})
	if s := cmd.Spec; s.Kind != DefaultKind || s.OnWorkerLost != fsm.LostRequeue {
		t.Fatalf("default kind: %+v", s)
	}
	if err := cmd.Validate(); err != nil {
		t.Fatal(err)
	}
}

// FuzzRequestDecoders: any bytes decode into each write request (or fail
// cleanly), translate to a command, and either fail validation with an
// invalid-argument error or encode, decode and apply to a fresh state
// machine without panicking.
func FuzzRequestDecoders(f *testing.F) {
	for _, w := range writes() {
		b, _ := proto.Marshal(w.msg)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, w := range writes() {
			msg := w.msg.ProtoReflect().New().Interface()
			if proto.Unmarshal(data, msg) != nil {
				continue
			}
			cmd := w.cmd(msg)
			enc, err := fsm.Encode(1, cmd)
			if err != nil {
				if !errors.Is(err, fsm.ErrInvalidArgument) && !errors.Is(err, fsm.ErrTooLarge) {
					t.Fatalf("%T: validation failed without a validation error: %v", msg, err)
				}
				continue
			}
			env, err := fsm.Decode(enc)
			if err != nil || !reflect.DeepEqual(env.Command, cmd) {
				t.Fatalf("%T: round trip: %v", msg, err)
			}
			if _, err := fsm.New().Apply(1, enc); fsm.IsFatal(err) {
				t.Fatalf("%T: apply: %v", msg, err)
			}
		}
	})
}
