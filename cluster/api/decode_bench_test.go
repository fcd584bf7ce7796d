package api

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Decoding one heartbeat of one lease and of ten, as the API decodes every
// beat, strictly and with proto.Unmarshal alone (what strictness adds is
// the difference): go test -run '^$' -bench DecodeHeartbeat ./cluster/api/
func BenchmarkStrictDecodeHeartbeat(b *testing.B) {
	codec := strictCodec{name: "proto"}
	benchDecodeHeartbeat(b, codec.Unmarshal)
}

func BenchmarkPlainDecodeHeartbeat(b *testing.B) {
	benchDecodeHeartbeat(b, func(wire []byte, v any) error { return proto.Unmarshal(wire, v.(proto.Message)) })
}

// heartbeatRequest is a worker's beat for n leases.
func heartbeatRequest(n int) *pb.HeartbeatRequest {
	req := &pb.HeartbeatRequest{WorkerId: "worker-0001"}
	for i := range n {
		req.Leases = append(req.Leases, &pb.LeaseRef{JobId: fmt.Sprintf("job-%06d", i), Token: uint64(1<<30 + i)})
	}
	return req
}

func benchDecodeHeartbeat(b *testing.B, unmarshal func([]byte, any) error) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			wire, err := proto.Marshal(heartbeatRequest(n))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				var got pb.HeartbeatRequest
				if err := unmarshal(wire, &got); err != nil || len(got.Leases) != n || got.ProtoReflect().GetUnknown() != nil {
					b.Fatal(err, len(got.Leases))
				}
			}
		})
	}
}

// The strictness check alone, for a beat of ten leases: from the wire bytes
// (what decoding does) and by walking the decoded message (what it did
// before, and still does for a request the wire check cannot clear).
func BenchmarkWireCleanHeartbeat(b *testing.B) {
	req := heartbeatRequest(10)
	wire, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	md := req.ProtoReflect().Descriptor()
	b.ReportAllocs()
	for b.Loop() {
		if !wireClean(wire, md) {
			b.Fatal("not clean")
		}
	}
}

func BenchmarkWalkHeartbeat(b *testing.B) {
	m := heartbeatRequest(10).ProtoReflect()
	b.ReportAllocs()
	for b.Loop() {
		if checkDecoded(m, "") != nil {
			b.Fatal("refused")
		}
	}
}
