package api

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

var (
	binaryCodec = strictCodec{name: "proto"}
	jsonCodec   = strictCodec{name: "json", json: true}
)

func marshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// withUnknown is b with field num (a varint) appended.
func withUnknown(b []byte, num protowire.Number) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), 1)
}

func TestStrictDecoding(t *testing.T) {
	spec := marshal(&pb.JobSpec{Id: "a", Queue: "q"})
	specField := func(inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), inner)
	}
	forged := protowire.AppendBytes(protowire.AppendTag(marshal(&pb.GetJobRequest{Id: "a"}), markNumber, protowire.BytesType),
		protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "anything I like"))
	for _, tc := range []struct {
		name  string
		codec strictCodec
		msg   proto.Message
		data  string
		field string // "": accepted
	}{
		{"json", jsonCodec, &pb.SubmitJobRequest{}, `{"spec":{"id":"a","queue":"q","onWorkerLost":"LOST_POLICY_FAIL"}}`, ""},
		{"json proto names", jsonCodec, &pb.SubmitJobRequest{}, `{"spec":{"id":"a","on_worker_lost":"LOST_POLICY_FAIL"}}`, ""},
		{"json enum name", jsonCodec, &pb.SubmitJobRequest{}, `{"spec":{"id":"a","queue":"q","onWorkerLost":"LOST_POLICY_NUKE"}}`, "spec.on_worker_lost"},
		{"json enum proto name", jsonCodec, &pb.SubmitJobRequest{}, `{"spec":{"on_worker_lost":"LOST_POLICY_NUKE"}}`, "spec.on_worker_lost"},
		{"json enum number", jsonCodec, &pb.SubmitJobRequest{}, `{"spec":{"id":"a","onWorkerLost":257}}`, "spec.on_worker_lost"},
		{"json enum null", jsonCodec, &pb.SubmitJobRequest{}, `{"spec":{"id":"a","onWorkerLost":null}}`, ""},
		{"json unknown field", jsonCodec, &pb.SubmitJobRequest{}, `{"spec":{"id":"a"},"bogus":1}`, "bogus"},
		{"json nested unknown field", jsonCodec, &pb.SubmitJobRequest{}, `{"spec":{"id":"a","bogus":1}}`, "spec.bogus"},
		{"json unknown field in a list", jsonCodec, &pb.HeartbeatRequest{}, `{"workerId":"w","leases":[{"jobId":"j","token":"1"},{"jobId":"k","tokn":"2"}]}`, "leases.tokn"},
		{"json enum in a list request", jsonCodec, &pb.ListJobsRequest{}, `{"state":"JOB_STATE_ZOMBIE"}`, "state"},
		{"json odd key", jsonCodec, &pb.GetJobRequest{}, `{"id":"a","a b\n":1}`, `"a b\n"`},
		{"json long key", jsonCodec, &pb.GetJobRequest{}, `{"` + strings.Repeat("k", 1000) + `":1}`, `"` + strings.Repeat("k", 64) + `..."`},
		{"json syntax", jsonCodec, &pb.GetJobRequest{}, `{"id":`, "request"},
		{"json empty", jsonCodec, &pb.GetJobRequest{}, ``, "request"},
		{"json bad duration", jsonCodec, &pb.AcquireRequest{}, `{"wait":"forever"}`, "request"},
		{"json duplicate", jsonCodec, &pb.GetJobRequest{}, `{"id":"a","id":"b"}`, "request"},
		{"binary", binaryCodec, &pb.SubmitJobRequest{}, string(specField(spec)), ""},
		{"binary unknown field", binaryCodec, &pb.SubmitJobRequest{}, string(withUnknown(specField(spec), 99)), "99"},
		{"binary nested unknown field", binaryCodec, &pb.SubmitJobRequest{}, string(specField(withUnknown(spec, 10))), "spec.10"},
		{"binary unknown field in a list", binaryCodec, &pb.HeartbeatRequest{}, string(protowire.AppendBytes(protowire.AppendTag(
			marshal(&pb.HeartbeatRequest{WorkerId: "w", Leases: []*pb.LeaseRef{{JobId: "j", Token: 1}}}), 2, protowire.BytesType),
			withUnknown(marshal(&pb.LeaseRef{JobId: "k", Token: 2}), 9))), "leases.9"},
		{"binary enum number", binaryCodec, &pb.SubmitJobRequest{}, string(marshal(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", OnWorkerLost: 257}})), "spec.on_worker_lost"},
		{"binary outcome number", binaryCodec, &pb.ReportRequest{}, string(marshal(&pb.ReportRequest{Outcome: 9})), "outcome"},
		{"binary consistency number", binaryCodec, &pb.GetJobRequest{}, string(marshal(&pb.GetJobRequest{Id: "a", Consistency: 2})), "consistency"},
		{"binary garbage", binaryCodec, &pb.GetJobRequest{}, "\xff\xff\xff", "request"},
		{"binary forged mark", binaryCodec, &pb.GetJobRequest{}, string(forged), "536870911"},
	} {
		msg := tc.msg.ProtoReflect().New().Interface()
		if err := tc.codec.Unmarshal([]byte(tc.data), msg); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		refusal := refusalOf(msg)
		if tc.field == "" {
			if refusal != nil {
				t.Errorf("%s: refused: %v", tc.name, refusal)
			}
			continue
		}
		d := transport.DetailOf(toWire(refusal))
		if d.GetReason() != transport.ReasonInvalidArgument || d.GetField() != tc.field {
			t.Errorf("%s: %v (detail %v), want INVALID_ARGUMENT naming %s", tc.name, refusal, d, tc.field)
		}
	}
}

// Answers are encoded as Connect's default codecs encode them.
func TestStrictCodecMarshals(t *testing.T) {
	msg := &pb.GetJobResponse{Job: &pb.Job{Spec: &pb.JobSpec{Id: "a", OnWorkerLost: pb.LostPolicy_LOST_POLICY_FAIL}, Seq: 3}}
	got, err := jsonCodec.Marshal(msg)
	want, _ := protojson.Marshal(msg)
	if err != nil || string(got) != string(want) || !strings.Contains(string(got), `"onWorkerLost":"LOST_POLICY_FAIL"`) {
		t.Fatalf("json: %s, %v; want %s", got, err, want)
	}
	got, err = binaryCodec.Marshal(msg)
	if err != nil || string(got) != string(marshal(msg)) {
		t.Fatalf("binary: %x, %v", got, err)
	}
	if _, err := jsonCodec.Marshal("not a message"); err == nil {
		t.Fatal("a string was marshalled")
	}
}
