package api_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// wireError is a Connect error as a plain HTTP client reads it.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details []struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	} `json:"details"`
}

// post sends body to a procedure of the API in the Connect protocol, with
// nothing but net/http, and returns the status and the decoded error (nil
// on success).
func post(t *testing.T, apiAddr, procedure, contentType string, body []byte) (int, *wireError, *pb.ErrorDetail) {
	t.Helper()
	req, err := http.NewRequestWithContext(callCtx(t), http.MethodPost, "http://"+apiAddr+procedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode == http.StatusOK {
		return res.StatusCode, nil, nil
	}
	var we wireError
	if err := json.Unmarshal(b, &we); err != nil {
		t.Fatalf("%s: status %d, body %q", procedure, res.StatusCode, b)
	}
	detail := &pb.ErrorDetail{}
	for _, d := range we.Details {
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if d.Type == "leasehold.v1.ErrorDetail" && err == nil && proto.Unmarshal(raw, detail) == nil {
			return res.StatusCode, &we, detail
		}
	}
	return res.StatusCode, &we, nil
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The attacks on decoding, replayed over plain HTTP against a served node:
// a lost policy the API does not name (by name in JSON, by number in JSON
// and binary, where a cast used to wrap 257 into REQUEUE), fields the
// schema does not have (JSON and binary, at the top and nested), and
// requests missing a field they need. Each is INVALID_ARGUMENT with the
// field in its ErrorDetail, and nothing reaches the log: the state hash
// and the event log are unchanged.
func TestStrictDecodingRefusesAttacks(t *testing.T) {
	c := clustertest.New(t, 1)
	leader := c.Leader()
	const submit = "/leasehold.v1.JobService/SubmitJob"
	status, we, _ := post(t, leader.APIAddr, submit, "application/json", []byte(`{"spec":{"id":"good","queue":"q","onWorkerLost":"LOST_POLICY_FAIL"}}`))
	if status != http.StatusOK {
		t.Fatalf("a good submit: %d %+v", status, we)
	}
	if j, err := leader.FSM().Job("good"); err != nil || j.OnWorkerLost != fsm.LostFail {
		t.Fatalf("the good job: %+v, %v", j, err)
	}
	c.WaitFor(10*time.Second, "the node recorded in the node table", func() bool { return len(leader.FSM().Nodes()) == 1 })

	nested := protowire.AppendTag(nil, 1, protowire.BytesType)
	nested = protowire.AppendBytes(nested, protowire.AppendVarint(protowire.AppendTag(
		mustMarshal(t, &pb.JobSpec{Id: "nested", Queue: "q"}), 10, protowire.VarintType), 1))
	for _, tc := range []struct {
		name, procedure, contentType string
		body                         []byte
		field, message               string
	}{
		{"json enum name", submit, "application/json",
			[]byte(`{"spec":{"id":"nuke","queue":"q","kind":"run","onWorkerLost":"LOST_POLICY_NUKE"}}`), "spec.on_worker_lost", ""},
		{"json enum number", submit, "application/json",
			[]byte(`{"spec":{"id":"nuke","queue":"q","kind":"run","onWorkerLost":257}}`), "spec.on_worker_lost", ""},
		{"json unknown field", submit, "application/json",
			[]byte(`{"spec":{"id":"nuke","queue":"q"},"bogus":1}`), "bogus", ""},
		{"json nested unknown field", submit, "application/json",
			[]byte(`{"spec":{"id":"nuke","queue":"q","priorty":9}}`), "spec.priorty", ""},
		{"binary enum number", submit, "application/proto",
			mustMarshal(t, &pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "nuke", Queue: "q", Kind: "run", OnWorkerLost: 257}}), "spec.on_worker_lost", ""},
		{"binary unknown field", submit, "application/proto",
			protowire.AppendVarint(protowire.AppendTag(mustMarshal(t, &pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "nuke", Queue: "q"}}), 99, protowire.VarintType), 1), "99", ""},
		{"binary nested unknown field", submit, "application/proto", nested, "spec.10", ""},
		{"submit without a queue", submit, "application/json", []byte(`{"spec":{"id":"noqueue"}}`), "spec.queue", ""},
		{"submit without a spec", submit, "application/json", []byte(`{}`), "spec", ""},
		{"get job without id", "/leasehold.v1.JobService/GetJob", "application/json", []byte(`{}`), "id", "id: must not be empty"},
		{"get lease without token", "/leasehold.v1.JobService/GetLease", "application/json", []byte(`{}`), "token", "token: must not be zero"},
		{"cancel without id", "/leasehold.v1.JobService/CancelJob", "application/json", []byte(`{}`), "id", "id: must not be empty"},
		{"list leases without worker", "/leasehold.v1.WorkerService/ListLeases", "application/json", []byte(`{}`), "worker_id", "worker_id: must not be empty"},
		{"fence without token", "/leasehold.v1.JobService/CheckFence", "application/json", []byte(`{"jobId":"good"}`), "token", "token: must not be zero"},
		{"list jobs, unknown state", "/leasehold.v1.JobService/ListJobs", "application/json", []byte(`{"state":"JOB_STATE_ZOMBIE"}`), "state", ""},
		{"remove node without id", "/leasehold.v1.ClusterService/RemoveNode", "application/json", []byte(`{}`), "id", "id: must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hash, stats := leader.FSM().Hash(), leader.FSM().Stats()
			status, we, detail := post(t, leader.APIAddr, tc.procedure, tc.contentType, tc.body)
			if status != http.StatusBadRequest || we == nil || we.Code != "invalid_argument" {
				t.Fatalf("status %d, error %+v; want 400 invalid_argument", status, we)
			}
			if detail.GetReason() != transport.ReasonInvalidArgument || detail.GetField() != tc.field {
				t.Fatalf("detail %v (message %q); want reason %s, field %s", detail, we.Message, transport.ReasonInvalidArgument, tc.field)
			}
			if tc.message != "" && we.Message != tc.message {
				t.Fatalf("message %q, want %q", we.Message, tc.message)
			}
			t.Logf("%s: %s %s field=%s: %s", tc.name, we.Code, detail.GetReason(), detail.GetField(), we.Message)
			after := leader.FSM().Stats()
			if leader.FSM().Hash() != hash || after.LastEventSeq != stats.LastEventSeq || after.Events != stats.Events {
				t.Fatalf("the refused request changed the state: events %d -> %d", stats.LastEventSeq, after.LastEventSeq)
			}
			for _, id := range []string{"nuke", "noqueue", "nested"} {
				if _, err := leader.FSM().Job(id); !errors.Is(err, fsm.ErrNotFound) {
					t.Fatalf("job %s exists: %v", id, err)
				}
			}
		})
	}
}

// Clients of every protocol get the refusal of a request the decoder
// refuses as the API's error, with its ErrorDetail: gRPC, gRPC-Web and
// Connect with binary or JSON, for unary calls and streams, and the Go
// client, which maps it to ErrInvalidArgument with the field.
func TestStrictDecodingRefusalsReachClients(t *testing.T) {
	c := clustertest.New(t, 1)
	leader := c.Leader()
	base := "http://" + leader.APIAddr
	unknown := func() *pb.GetJobRequest {
		req := &pb.GetJobRequest{Id: "a"}
		req.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
		return req
	}
	for name, opts := range map[string][]connect.ClientOption{
		"grpc":         {connect.WithGRPC()},
		"grpc-web":     {connect.WithGRPCWeb()},
		"connect":      nil,
		"connect json": {connect.WithProtoJSON()},
	} {
		jobs := leaseholdv1connect.NewJobServiceClient(http.DefaultClient, base, opts...)
		if name != "connect json" { // JSON cannot carry a field by number
			_, err := jobs.GetJob(callCtx(t), connect.NewRequest(unknown()))
			if connect.CodeOf(err) != connect.CodeInvalidArgument || transport.DetailOf(err).GetField() != "99" {
				t.Errorf("%s, an unknown field: %v (detail %v)", name, err, transport.DetailOf(err))
			}
		}
		_, err := jobs.GetJob(callCtx(t), connect.NewRequest(&pb.GetJobRequest{Id: "a", Consistency: 7}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || transport.DetailOf(err).GetField() != "consistency" {
			t.Errorf("%s, an unknown consistency: %v (detail %v)", name, err, transport.DetailOf(err))
		}
	}
	// A stream's request is refused on its first receive.
	events := leaseholdv1connect.NewEventServiceClient(http.DefaultClient, base, connect.WithGRPC())
	watch := &pb.WatchEventsRequest{}
	watch.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	stream, err := events.WatchEvents(callCtx(t), connect.NewRequest(watch))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
	}
	if connect.CodeOf(err) != connect.CodeInvalidArgument || transport.DetailOf(err).GetField() != "99" {
		t.Errorf("watch with an unknown field: %v (detail %v)", err, transport.DetailOf(err))
	}

	cl, err := client.New(client.Config{Endpoints: []string{leader.APIAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.Job(callCtx(t), "")
	var cerr *client.Error
	if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &cerr) || cerr.Field != "id" {
		t.Fatalf("the Go client's Job(\"\") = %v, want ErrInvalidArgument naming id", err)
	}
}
