package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
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
		{rules.CheckID("id", ""), transport.ReasonInvalidArgument, connect.CodeInvalidArgument,
			func(d *pb.ErrorDetail) bool { return d.GetField() == "id" }},
		{rules.TooLong("payload", 2, 1), transport.ReasonTooLarge, connect.CodeResourceExhausted,
			func(d *pb.ErrorDetail) bool { return d.GetField() == "payload" }},
		{fsm.ErrNotFound, transport.ReasonNotFound, connect.CodeNotFound, nil},
		{fsm.ErrConflict, transport.ReasonConflict, connect.CodeAlreadyExists, nil},
		{fsm.ErrStaleToken, transport.ReasonStaleToken, connect.CodeFailedPrecondition, nil},
		{fsm.ErrNotOwner, transport.ReasonNotOwner, connect.CodePermissionDenied, nil},
		{fsm.ErrUnknownWorker, transport.ReasonUnknownWorker, connect.CodeFailedPrecondition, nil},
		{fsm.ErrFinished, transport.ReasonJobFinished, connect.CodeFailedPrecondition, nil},
		{fsm.ErrNotDead, transport.ReasonJobNotDead, connect.CodeFailedPrecondition, nil},
		{fsm.ErrTokensExhausted, transport.ReasonTokensExhausted, connect.CodeResourceExhausted, nil},
		{errUnauthenticated, transport.ReasonUnauthenticated, connect.CodeUnauthenticated, nil},
		{errForbidden, transport.ReasonForbidden, connect.CodePermissionDenied, nil},
		{errors.New("boom"), transport.ReasonInternal, connect.CodeInternal, nil},
		{errRateLimited, transport.ReasonRateLimited, connect.CodeResourceExhausted, nil},
		{cluster.ErrQuotaExceeded, transport.ReasonQuotaExceeded, connect.CodeResourceExhausted, nil},
		{cluster.ErrDiskFull, transport.ReasonDiskFull, connect.CodeResourceExhausted, nil},
		{&cluster.UpgradeError{Need: 4, Level: 2, Nodes: []string{"n3 (level 2, version unknown)"}}, transport.ReasonUpgradeRequired, connect.CodeFailedPrecondition, nil},
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
		{RoleSubmitter, "/leasehold.v1.WorkerService/GetWorker", true},
		{RoleSubmitter, "/leasehold.v1.ClusterService/RemoveNode", false},
		{RoleWorker, "/leasehold.v1.WorkerService/Heartbeat", true},
		{RoleWorker, "/leasehold.v1.JobService/CheckFence", true},
		{RoleWorker, "/leasehold.v1.JobService/SubmitJob", false},
		{RoleWorker, "/leasehold.v1.Admin/Snapshot", false},
		{RoleAdmin, "/leasehold.v1.QueueService/PauseQueue", true},
		{RoleSubmitter, "/leasehold.v1.QueueService/ListQueues", false},
		{RoleSubmitter, "/leasehold.v1.QueueService/PauseQueue", false},
		{RoleWorker, "/leasehold.v1.QueueService/SetQueueLimit", false},
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
	cmd func(proto.Message) (fsm.Command, error)
} {
	type w = struct {
		msg proto.Message
		cmd func(proto.Message) (fsm.Command, error)
	}
	return []w{
		{&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "j", Queue: "q", Payload: []byte("x"), Kind: "run"}}, translation(func(r *pb.SubmitJobRequest) (*fsm.SubmitJob, error) { return submitOf(r, time.Now()) })},
		{&pb.CancelJobRequest{Id: "j", Kill: true}, translation(cancelOf)},
		{&pb.CancelSubmitterJobsRequest{Submitter: "s"}, translation(cancelSubmitterOf)},
		{&pb.RegisterWorkerRequest{WorkerId: "w", Capacity: 2, Version: "v1.0.0"}, translation(registerOf)},
		{&pb.DeregisterWorkerRequest{WorkerId: "w", Lost: true}, translation(deregisterOf)},
		{&pb.AcquireRequest{WorkerId: "w", RequestId: "r", Queues: []string{"q"}}, translation(acquireOf)},
		{&pb.StartLeaseRequest{WorkerId: "w", JobId: "j", Token: 1}, translation(startOf)},
		{&pb.ReportRequest{WorkerId: "w", JobId: "j", Token: 1, ReportId: "r", Outcome: pb.Outcome_OUTCOME_SUCCEEDED}, translation(reportOf)},
		{&pb.ReleaseRequest{WorkerId: "w", JobId: "j", Token: 1}, translation(releaseOf)},
		{&pb.PauseQueueRequest{Queue: "q"}, translation(pauseOf)},
		{&pb.ResumeQueueRequest{Queue: "q"}, translation(resumeOf)},
		{&pb.SetQueueLimitRequest{Queue: "q", MaxRunning: 3}, translation(queueLimitOf)},
		{&pb.CreateScheduleRequest{Name: "s", Cron: "*/5 * * * *", TimeZone: "Europe/Paris", Template: &pb.JobSpec{Queue: "q"},
			Missed: pb.MissedSlots_MISSED_SLOTS_RUN_LATEST}, translation(putScheduleOf)},
	}
}

// translation gives a typed translation the table's shape.
func translation[M proto.Message, C fsm.Command](of func(M) (C, error)) func(proto.Message) (fsm.Command, error) {
	return func(m proto.Message) (fsm.Command, error) {
		c, err := of(m.(M))
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

func TestSubmitDefaults(t *testing.T) {
	cmd, err := submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q", Kind: "run"}}, time.Now())
	if s := cmd.Spec; err != nil || s.OnWorkerLost != fsm.LostFail || s.MaxAttempts != DefaultMaxAttempts {
		t.Fatalf("run defaults: %+v, %v", s, err)
	}
	cmd, err = submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "b", Queue: "q"}}, time.Now())
	if s := cmd.Spec; err != nil || s.Kind != DefaultKind || s.OnWorkerLost != fsm.LostRequeue {
		t.Fatalf("default kind: %+v, %v", s, err)
	}
	if err := cmd.Validate(); err != nil {
		t.Fatal(err)
	}
}

// What a translation cannot say is refused, naming the field: a missing
// spec or queue, and an enum number the API does not name, which a cast
// would have wrapped into one it does (257 is 1 as a byte).
func TestTranslationsRefuse(t *testing.T) {
	spec := func(p pb.LostPolicy) *pb.SubmitJobRequest {
		return &pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q", OnWorkerLost: p}}
	}
	retry := func(r *pb.RetryPolicy) *pb.SubmitJobRequest {
		return &pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q", Retry: r}}
	}
	sec := durationpb.New(time.Second)
	for _, tc := range []struct {
		name  string
		err   error
		field string
	}{
		{"no spec", second(submitOf(&pb.SubmitJobRequest{}, time.Now())), "spec"},
		{"no queue", validated(submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a"}}, time.Now())), "spec.queue"},
		{"policy 3", second(submitOf(spec(3), time.Now())), "spec.on_worker_lost"},
		{"policy 257", second(submitOf(spec(257), time.Now())), "spec.on_worker_lost"},
		{"policy -1", second(submitOf(spec(-1), time.Now())), "spec.on_worker_lost"},
		{"retry initial -1s", second(submitOf(retry(&pb.RetryPolicy{Initial: durationpb.New(-time.Second)}), time.Now())), "spec.retry.initial"},
		{"retry initial 8 days", second(submitOf(retry(&pb.RetryPolicy{Initial: durationpb.New(192 * time.Hour)}), time.Now())), "spec.retry.initial"},
		{"retry max below initial", second(submitOf(retry(&pb.RetryPolicy{Initial: sec, Max: durationpb.New(time.Millisecond)}), time.Now())), "spec.retry.max"},
		{"retry multiplier 0.5", second(submitOf(retry(&pb.RetryPolicy{Initial: sec, Multiplier: 0.5}), time.Now())), "spec.retry.multiplier"},
		{"retry multiplier NaN", second(submitOf(retry(&pb.RetryPolicy{Initial: sec, Multiplier: math.NaN()}), time.Now())), "spec.retry.multiplier"},
		{"retry jitter 2", second(submitOf(retry(&pb.RetryPolicy{Initial: sec, Jitter: 2}), time.Now())), "spec.retry.jitter"},
		{"run_at and run_in", second(submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q"},
			RunAt: timestamppb.Now(), RunIn: sec}, time.Now())), "run_at"},
		{"run_in -1s", second(submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q"},
			RunIn: durationpb.New(-time.Second)}, time.Now())), "run_in"},
		{"run_at in two years", second(submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q"},
			RunAt: timestamppb.New(time.Now().Add(2 * 365 * 24 * time.Hour))}, time.Now())), "run_at"},
		// 2^64 ns (584 years) and a minute ahead: UnixNano would wrap it to a minute from now.
		{"run_at past 2262", second(submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q"},
			RunAt: &timestamppb.Timestamp{Seconds: time.Now().Unix() + 18446744073 + 60}}, time.Now())), "run_at"},
		{"timeout 999ms", second(submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q", Timeout: durationpb.New(999 * time.Millisecond)}}, time.Now())), "spec.timeout"},
		{"timeout 8 days", second(submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q", Timeout: durationpb.New(192 * time.Hour)}}, time.Now())), "spec.timeout"},
		{"timeout -1s", second(submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q", Timeout: durationpb.New(-time.Second)}}, time.Now())), "spec.timeout"},
		{"timeout 1.5ms over 1s", second(submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q", Timeout: durationpb.New(time.Second + 1500*time.Microsecond)}}, time.Now())), "spec.timeout"},
		{"timeout invalid", second(submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q", Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}}, time.Now())), "spec.timeout"},
		{"outcome timed_out", validated(reportOf(&pb.ReportRequest{WorkerId: "w", JobId: "j", Token: 1, ReportId: "r",
			Outcome: pb.Outcome_OUTCOME_TIMED_OUT})), "outcome"},
		{"retry_after without retryable", validated(reportOf(&pb.ReportRequest{WorkerId: "w", JobId: "j", Token: 1, ReportId: "r",
			Outcome: pb.Outcome_OUTCOME_FAILED, RetryAfter: sec})), "retry_after"},
		{"outcome 257", second(reportOf(&pb.ReportRequest{WorkerId: "w", JobId: "j", Token: 1, ReportId: "r", Outcome: 257})), "outcome"},
		{"cancel without id", second(cancelOf(&pb.CancelJobRequest{})), "id"},
		{"retry without id", second(retryOf(&pb.RetryJobRequest{})), "id"},
		{"purge naming nothing", second(purgeOf(&pb.PurgeJobsRequest{})), "ids"},
		{"purge by ids and queue", second(purgeOf(&pb.PurgeJobsRequest{Ids: []string{"a"}, Queue: "q"})), "ids"},
		{"purge by ids and age 0s", second(purgeOf(&pb.PurgeJobsRequest{Ids: []string{"a"}, OlderThan: durationpb.New(0)})), "ids"},
		{"purge older than -1s", second(purgeOf(&pb.PurgeJobsRequest{OlderThan: durationpb.New(-time.Second)})), "older_than"},
		{"purge older than 200 years", second(purgeOf(&pb.PurgeJobsRequest{OlderThan: durationpb.New(200 * 365 * 24 * time.Hour)})), "older_than"},
		{"purge older than out of range", second(purgeOf(&pb.PurgeJobsRequest{OlderThan: &durationpb.Duration{Seconds: 1, Nanos: -1}})), "older_than"},
		{"purge a bad id", validated(purgeOf(&pb.PurgeJobsRequest{Ids: []string{"a b"}})), "ids"},
		{"purge limit 1001", validated(purgeOf(&pb.PurgeJobsRequest{Queue: "q", Limit: 1001})), "limit"},
		{"purge a bad queue", validated(purgeOf(&pb.PurgeJobsRequest{Queue: "a/b"})), "queue"},
		{"wait out of range", second(waitOf(&durationpb.Duration{Seconds: 1, Nanos: -1})), "wait"},
		{"consistency 2", checkConsistency(2), "consistency"},
	} {
		d := transport.DetailOf(toWire(tc.err))
		if d.GetReason() != transport.ReasonInvalidArgument || d.GetField() != tc.field {
			t.Errorf("%s: %v (detail %v), want INVALID_ARGUMENT naming %s", tc.name, tc.err, d, tc.field)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// validated is a translation's error, or its command's validation error.
func validated[C fsm.Command](c C, err error) error {
	if err != nil {
		return err
	}
	return c.Validate()
}

// FuzzRequestDecoders: any bytes, decoded by the strict codecs (binary and
// JSON) into every request message of the API, either are refused, with an
// INVALID_ARGUMENT naming a field and nothing of them kept, or decode to a
// message with no unknown field and no unnamed enum value that the lenient
// decoders read alike. A write request then translates to a command that
// either fails validation with an invalid-argument error naming its field
// or encodes, decodes and applies to a fresh state machine without
// panicking.
func FuzzRequestDecoders(f *testing.F) {
	for _, w := range writes() {
		b, _ := proto.Marshal(w.msg)
		f.Add(b)
		b, _ = protojson.Marshal(w.msg)
		f.Add(b)
	}
	f.Add([]byte(`{"spec":{"id":"a","queue":"q","onWorkerLost":"LOST_POLICY_NUKE"}}`))
	f.Add([]byte(`{"spec":{"id":"a","queue":"q","on_worker_lost":257},"bogus":1}`))
	f.Add(protowire.AppendVarint(protowire.AppendTag([]byte("\n\x03\n\x01a"), 99, protowire.VarintType), 1))
	translations := map[protoreflect.FullName]func(proto.Message) (fsm.Command, error){}
	for _, w := range writes() {
		translations[w.msg.ProtoReflect().Descriptor().FullName()] = w.cmd
	}
	types := requestTypes(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, codec := range []strictCodec{{name: "proto"}, {name: "json", json: true}} {
			for _, mt := range types {
				msg := mt.New().Interface()
				if err := codec.Unmarshal(data, msg); err != nil {
					t.Fatalf("%s %T: %v", codec.name, msg, err)
				}
				if refusal := refusalOf(msg); refusal != nil {
					d := transport.DetailOf(toWire(refusal))
					if d.GetReason() != transport.ReasonInvalidArgument || d.GetField() == "" {
						t.Fatalf("%s %T: refused with %v (detail %v)", codec.name, msg, refusal, d)
					}
					msg.ProtoReflect().SetUnknown(nil)
					if proto.Size(msg) != 0 {
						t.Fatalf("%s %T: a refused message keeps %v", codec.name, msg, msg)
					}
					continue
				}
				if err := checkDecoded(msg.ProtoReflect(), ""); err != nil {
					t.Fatalf("%s %T: accepted with %v", codec.name, msg, err)
				}
				lenient := mt.New().Interface()
				var err error
				if codec.json {
					err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, lenient)
				} else {
					err = proto.Unmarshal(data, lenient)
				}
				if err != nil || !proto.Equal(msg, lenient) {
					t.Fatalf("%s %T: strict %v, lenient %v (%v)", codec.name, msg, msg, lenient, err)
				}
				if of := translations[mt.Descriptor().FullName()]; of != nil {
					checkTranslation(t, msg, of)
				}
			}
		}
	})
}

// checkTranslation translates a decoded write request and validates,
// encodes, decodes and applies its command.
func checkTranslation(t *testing.T, msg proto.Message, of func(proto.Message) (fsm.Command, error)) {
	cmd, err := of(msg)
	var enc []byte
	if err == nil {
		enc, err = fsm.Encode(1, cmd)
	}
	if err != nil {
		d := transport.DetailOf(toWire(err))
		if r := d.GetReason(); r != transport.ReasonInvalidArgument && r != transport.ReasonTooLarge || d.GetField() == "" {
			t.Fatalf("%T: refused without a field's validation error: %v", msg, err)
		}
		return
	}
	env, err := fsm.Decode(enc)
	if err != nil || !reflect.DeepEqual(env.Command, cmd) {
		t.Fatalf("%T: round trip: %v", msg, err)
	}
	if _, err := fsm.New().Apply(1, enc); fsm.IsFatal(err) {
		t.Fatalf("%T: apply: %v", msg, err)
	}
}

// requestTypes are the request messages of every method of the API.
func requestTypes(tb testing.TB) []protoreflect.MessageType {
	var out []protoreflect.MessageType
	for _, file := range []protoreflect.FileDescriptor{pb.File_leasehold_v1_jobs_proto, pb.File_leasehold_v1_workers_proto,
		pb.File_leasehold_v1_events_proto, pb.File_leasehold_v1_cluster_proto, pb.File_leasehold_v1_queues_proto,
		pb.File_leasehold_v1_schedules_proto} {
		for i := 0; i < file.Services().Len(); i++ {
			methods := file.Services().Get(i).Methods()
			for j := 0; j < methods.Len(); j++ {
				mt, err := protoregistry.GlobalTypes.FindMessageByName(methods.Get(j).Input().FullName())
				if err != nil {
					tb.Fatal(err)
				}
				out = append(out, mt)
			}
		}
	}
	return out
}

// TestTimeoutTranslates: spec.timeout reaches the command in milliseconds
// and comes back in the job's spec; a timed-out lease shows kill (what the
// worker is told) and timed_out, in job views and heartbeat answers.
func TestTimeoutTranslates(t *testing.T) {
	cmd, err := submitOf(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", Queue: "q", Timeout: durationpb.New(30 * time.Second)}}, time.Now())
	if err != nil || cmd.TimeoutMs != 30_000 || fsm.CodecOf(cmd) != 6 {
		t.Fatalf("submit with a 30 s timeout: %+v %v", cmd, err)
	}
	j := fsm.Job{JobSpec: cmd.Spec, TimeoutMs: cmd.TimeoutMs, State: fsm.JobRunning}
	j.SetLeases([]fsm.Lease{{Token: 7, State: fsm.LeaseActive, Revoke: fsm.RevokeTimeout}})
	out := jobToProto(&j, time.Now())
	if out.GetSpec().GetTimeout().AsDuration() != 30*time.Second {
		t.Fatalf("job view timeout %v", out.GetSpec().GetTimeout())
	}
	if l := out.GetLeases()[0]; l.GetRevoke() != pb.Revoke_REVOKE_KILL || !l.GetTimedOut() {
		t.Fatalf("timed-out lease view: revoke %v timed_out %t", l.GetRevoke(), l.GetTimedOut())
	}
	var hb pb.HeartbeatResponse
	heartbeatToProto(&hb, &cluster.HeartbeatResult{Leases: []cluster.LeaseStatus{{JobID: "a", Token: 7,
		Verdict: cluster.VerdictStop, Revoke: fsm.RevokeTimeout}}}, nil)
	if hb.GetLeases()[0].GetRevoke() != pb.Revoke_REVOKE_KILL {
		t.Fatalf("heartbeat answer for a timed-out lease: %v, want kill", hb.GetLeases()[0].GetRevoke())
	}
}
