package api

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Decoding one heartbeat of ten leases, as the API decodes every beat,
// strictly and with proto.Unmarshal alone (what strictness adds is the
// difference): go test -run '^$' -bench DecodeHeartbeat ./cluster/api/
func BenchmarkStrictDecodeHeartbeat(b *testing.B) {
	codec := strictCodec{name: "proto"}
	benchDecodeHeartbeat(b, codec.Unmarshal)
}

func BenchmarkPlainDecodeHeartbeat(b *testing.B) {
	benchDecodeHeartbeat(b, func(wire []byte, v any) error { return proto.Unmarshal(wire, v.(proto.Message)) })
}

func benchDecodeHeartbeat(b *testing.B, unmarshal func([]byte, any) error) {
	req := &pb.HeartbeatRequest{WorkerId: "worker-0001"}
	for i := range 10 {
		req.Leases = append(req.Leases, &pb.LeaseRef{JobId: fmt.Sprintf("job-%06d", i), Token: uint64(1<<30 + i)})
	}
	wire, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var got pb.HeartbeatRequest
		if err := unmarshal(wire, &got); err != nil || len(got.Leases) != 10 || got.ProtoReflect().GetUnknown() != nil {
			b.Fatal(err, len(got.Leases))
		}
	}
}
