package api

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/cluster"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// randomBeat is a stream beat as a worker sends it: a worker of a few, up
// to a dozen leases (now and then 17 to 40) of a small pool of jobs (so beats in a row share
// strings, and differ), now and then no heartbeat, empty ids, or notes.
func randomBeat(rng *rand.Rand) *pb.HeartbeatStreamRequest {
	r := &pb.HeartbeatStreamRequest{Seq: rng.Uint64N(1 << 40)}
	if rng.IntN(20) == 0 {
		return r
	}
	hb := &pb.HeartbeatRequest{}
	if rng.IntN(10) != 0 {
		hb.WorkerId = fmt.Sprintf("worker-%d", rng.IntN(3))
	}
	n := rng.IntN(13)
	if rng.IntN(8) == 0 {
		n = 17 + rng.IntN(24) // past the decoder's scratch on the stack
	}
	for range n {
		ref := &pb.LeaseRef{Token: rng.Uint64N(1 << 33)}
		if rng.IntN(10) != 0 {
			ref.JobId = fmt.Sprintf("job-%d", rng.IntN(20))
		}
		hb.Leases = append(hb.Leases, ref)
	}
	if rng.IntN(10) == 0 && len(hb.Leases) > 0 {
		hb.Notes = []*pb.ProgressNote{{Token: hb.Leases[0].Token, Note: "half way"}}
	}
	r.Heartbeat = hb
	return r
}

// The stream's beats, decoded one after another into one message as the
// stream does: decodeBeat takes every beat without notes, and leaves the
// message equal to what proto.Unmarshal makes of the bytes, whatever the
// beat before it held.
func TestDecodeBeatMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var into pb.HeartbeatStreamRequest
	taken := 0
	for i := range 20000 {
		want := randomBeat(rng)
		b := marshal(want)
		if !decodeBeat(b, &into) {
			if len(want.GetHeartbeat().GetNotes()) == 0 {
				t.Fatalf("beat %d declined: %v", i, want)
			}
			into.Reset() // as the general decoder does
			continue
		}
		taken++
		if len(want.GetHeartbeat().GetNotes()) > 0 {
			t.Fatalf("beat %d with notes taken", i)
		}
		fresh := new(pb.HeartbeatStreamRequest)
		if err := proto.Unmarshal(b, fresh); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&into, fresh) || (into.Heartbeat == nil) != (fresh.Heartbeat == nil) {
			t.Fatalf("beat %d decoded as %v, proto.Unmarshal makes %v", i, &into, fresh)
		}
	}
	if taken < 15000 {
		t.Fatalf("only %d of 20,000 beats taken", taken)
	}
}

// Whatever the bytes, the codec's answer is the one it gave before
// decodeBeat: the same message or the same refusal, decoded into a
// message that held the previous beat.
func TestDecodeBeatKeepsTheCodecsAnswers(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	codec := strictCodec{name: "proto"}
	var into pb.HeartbeatStreamRequest
	var fast, refused, accepted int
	for range 50000 {
		b := marshal(randomBeat(rng))
		for range rng.IntN(3) {
			b = mutate(rng, b)
		}
		if rng.IntN(4) == 0 { // a field repeated, as a client may send
			b = append(b, marshal(randomBeat(rng))...)
		}
		if decodeBeat(b, proto.Clone(&into).(*pb.HeartbeatStreamRequest)) {
			fast++
		}
		if err := codec.Unmarshal(b, &into); err != nil {
			t.Fatal(err)
		}
		// The old path: a fresh message, proto.Unmarshal, the strict
		// check, and a refusal marked in the message (compared with it).
		want := new(pb.HeartbeatStreamRequest)
		if err := codec.decodeGeneral(b, want); err != nil {
			mark(want, err)
		}
		if !proto.Equal(&into, want) || (into.Heartbeat == nil) != (want.Heartbeat == nil) {
			t.Fatalf("bytes % x: decoded %v (refusal %v), the general decoder %v (refusal %v)", b, &into, refusalOf(&into), want, refusalOf(want))
		}
		if refusalOf(want) != nil {
			refused++
			continue
		}
		accepted++
	}
	if fast < 10000 || refused < 1000 || accepted-fast < 1000 {
		t.Fatalf("decodeBeat took %d, the codec refused %d and accepted %d: the mutations did not exercise every outcome", fast, refused, accepted)
	}
	t.Logf("decodeBeat took %d; the codec accepted %d, refused %d", fast, accepted, refused)
}

// Declined: a field decodeBeat does not take exactly is left to the
// general decoder, whatever the beat before held.
func TestDecodeBeatDeclines(t *testing.T) {
	beat := marshal(&pb.HeartbeatStreamRequest{Seq: 1, Heartbeat: &pb.HeartbeatRequest{WorkerId: "w", Leases: []*pb.LeaseRef{{JobId: "j", Token: 2}}}})
	ref := marshal(&pb.LeaseRef{JobId: "j", Token: 2})
	hb := func(fields []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), 2, protowire.BytesType), fields)
	}
	lease := func(fields []byte) []byte {
		return hb(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), fields))
	}
	for name, b := range map[string][]byte{
		"seq twice":        append(slicesClone(beat), protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 9)...),
		"heartbeat twice":  append(slicesClone(beat), beat[2:]...),
		"seq as bytes":     protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "x"),
		"unknown field":    protowire.AppendVarint(protowire.AppendTag(slicesClone(beat), 7, protowire.VarintType), 1),
		"notes":            hb(protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), nil)),
		"worker twice":     hb(protowire.AppendString(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "a"), 1, protowire.BytesType), "b")),
		"worker not UTF-8": hb(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff")),
		"job not UTF-8":    lease(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff")),
		"token twice":      lease(protowire.AppendVarint(protowire.AppendTag(slicesClone(ref), 2, protowire.VarintType), 3)),
		"token as fixed64": lease(protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), 3)),
		"lease field 3":    lease(protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 3)),
		"truncated":        beat[:len(beat)-1],
		"overlong varint":  append([]byte{0x08}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02),
	} {
		into := new(pb.HeartbeatStreamRequest)
		if err := proto.Unmarshal(beat, into); err != nil {
			t.Fatal(err)
		}
		if decodeBeat(b, into) {
			t.Errorf("%s: taken, as %v", name, into)
		}
	}
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

// A steady stream's beat decodes without allocating.
func TestDecodeBeatReusesTheLastBeat(t *testing.T) {
	b := marshal(&pb.HeartbeatStreamRequest{Seq: 7, Heartbeat: heartbeatRequest(10)})
	var into pb.HeartbeatStreamRequest
	if !decodeBeat(b, &into) {
		t.Fatal("declined")
	}
	if n := testing.AllocsPerRun(100, func() { decodeBeat(b, &into) }); n != 0 {
		t.Fatalf("a beat like the last one: %.0f allocations, want 0", n)
	}
	// A shorter beat lets the references it no longer names go.
	if !decodeBeat(marshal(&pb.HeartbeatStreamRequest{Seq: 8, Heartbeat: heartbeatRequest(2)}), &into) {
		t.Fatal("declined")
	}
	leases := into.Heartbeat.Leases
	if len(leases) != 2 || slices.ContainsFunc(leases[2:cap(leases)], func(r *pb.LeaseRef) bool { return r != nil }) {
		t.Fatalf("after a beat of two leases, the array holds %d beyond them", len(slices.DeleteFunc(slices.Clone(leases[2:cap(leases)]), func(r *pb.LeaseRef) bool { return r == nil })))
	}
}

// beatOf is a stream beat of one worker naming n leases, of jobs
// job-<first> onwards.
func beatOf(first, n int) []byte {
	hb := &pb.HeartbeatRequest{WorkerId: "worker-0001"}
	for i := range n {
		hb.Leases = append(hb.Leases, &pb.LeaseRef{JobId: fmt.Sprintf("job-%06d", first+i), Token: uint64(first + i + 1)})
	}
	return marshal(&pb.HeartbeatStreamRequest{Seq: 1, Heartbeat: hb})
}

// A beat whose job ids are not the last beat's, as on a stream that
// carries many workers' beats, makes its ids in one allocation, one string
// they are all parts of, and the references a longer beat needs in one
// more: the beats a stream keeps for reuse hold no small objects of their
// own among the API's garbage.
func TestDecodeBeatMakesItsIDsTogether(t *testing.T) {
	a, b := beatOf(0, 10), beatOf(100, 10)
	var into pb.HeartbeatStreamRequest
	if !decodeBeat(a, &into) {
		t.Fatal("declined")
	}
	flip := false
	if n := testing.AllocsPerRun(100, func() {
		if flip = !flip; flip {
			decodeBeat(b, &into)
		} else {
			decodeBeat(a, &into)
		}
	}); n != 1 {
		t.Fatalf("a beat of ten other ids: %.0f allocations, want 1", n)
	}
	// The ids lie one after the other in one string.
	leases := into.Heartbeat.Leases
	base := unsafe.StringData(leases[0].JobId)
	at := 0
	for i, r := range leases {
		if r.JobId != fmt.Sprintf("job-%06d", i) && r.JobId != fmt.Sprintf("job-%06d", 100+i) {
			t.Fatalf("lease %d: job id %q", i, r.JobId)
		}
		if got := unsafe.StringData(r.JobId); got != (*byte)(unsafe.Add(unsafe.Pointer(base), at)) {
			t.Fatalf("lease %d's id is not after lease %d's", i, i-1)
		}
		at += len(r.JobId)
	}
	// A longer beat: its five new references come in one block.
	var grown pb.HeartbeatStreamRequest
	if !decodeBeat(beatOf(0, 5), &grown) {
		t.Fatal("declined")
	}
	if !decodeBeat(beatOf(0, 10), &grown) {
		t.Fatal("declined")
	}
	refs := grown.Heartbeat.Leases
	for i := 6; i < 10; i++ {
		if uintptr(unsafe.Pointer(refs[i]))-uintptr(unsafe.Pointer(refs[i-1])) != unsafe.Sizeof(pb.LeaseRef{}) {
			t.Fatalf("reference %d is not beside reference %d", i, i-1)
		}
	}
}

// A shorter beat keeps nothing of a longer one's: the references it no
// longer names are emptied (their block may live on for the others), its
// ids are a string of its own, and a beat much shorter than the last
// starts afresh, references and all.
func TestDecodeBeatLetsALongBeatGo(t *testing.T) {
	within := func(id string, refs []*pb.LeaseRef) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(id)))
		for _, r := range refs {
			if q := uintptr(unsafe.Pointer(unsafe.StringData(r.JobId))); r.JobId != "" && p >= q && p < q+uintptr(len(r.JobId)) {
				return true
			}
		}
		return false
	}
	var into pb.HeartbeatStreamRequest
	if !decodeBeat(beatOf(0, 40), &into) {
		t.Fatal("declined")
	}
	long := slices.Clone(into.Heartbeat.Leases)
	ids := make([]*pb.LeaseRef, len(long)) // the long beat's ids, kept apart
	for i, r := range long {
		ids[i] = &pb.LeaseRef{JobId: r.JobId}
	}
	// 30 of 40: the same references, the ten past them emptied.
	if !decodeBeat(beatOf(0, 30), &into) {
		t.Fatal("declined")
	}
	for i, r := range into.Heartbeat.Leases {
		if r != long[i] || r.JobId != fmt.Sprintf("job-%06d", i) {
			t.Fatalf("30 of 40: reference %d is %p %q", i, r, r.JobId)
		}
		if within(r.JobId, ids) {
			t.Fatalf("30 of 40: id %d is still part of the 40's string", i)
		}
	}
	for i, r := range long[30:] {
		if r.JobId != "" || r.Token != 0 {
			t.Fatalf("reference %d, no longer named, still holds %q %d", 30+i, r.JobId, r.Token)
		}
	}
	// 3 of 30: fresh references.
	if !decodeBeat(beatOf(0, 3), &into) {
		t.Fatal("declined")
	}
	for i, r := range into.Heartbeat.Leases {
		if slices.Contains(long, r) || r.JobId != fmt.Sprintf("job-%06d", i) {
			t.Fatalf("3 of 30: reference %d is one of the long beat's, or holds %q", i, r.JobId)
		}
	}
}

// An answer shorter than the last one on a stream lets the last one's job
// ids go from the statuses it no longer uses.
func TestHeartbeatAnswerLetsTheLastIDsGo(t *testing.T) {
	var out pb.HeartbeatResponse
	statuses := heartbeatToProto(&out, &cluster.HeartbeatResult{Leases: []cluster.LeaseStatus{
		{JobID: "a", Token: 1}, {JobID: "b", Token: 2}, {JobID: "c", Token: 3}}}, nil)
	statuses = heartbeatToProto(&out, &cluster.HeartbeatResult{Leases: []cluster.LeaseStatus{{JobID: "d", Token: 4}}}, statuses)
	if len(out.Leases) != 1 || out.Leases[0].JobId != "d" {
		t.Fatalf("answer: %v", out.Leases)
	}
	for i, ps := range statuses[1:] {
		if ps.JobId != "" {
			t.Fatalf("status %d, unused, still holds %q", i+1, ps.JobId)
		}
	}
}

// A beat of a heartbeat stream, decoded by the codec into the message that
// held the stream's previous beat, as the stream decodes every beat:
// go test -run '^$' -bench StreamBeat ./cluster/api/
func BenchmarkDecodeStreamBeat(b *testing.B) {
	codec := strictCodec{name: "proto"}
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			wire := marshal(&pb.HeartbeatStreamRequest{Seq: 1, Heartbeat: heartbeatRequest(n)})
			var into pb.HeartbeatStreamRequest
			b.ReportAllocs()
			for b.Loop() {
				if err := codec.Unmarshal(wire, &into); err != nil || len(into.GetHeartbeat().GetLeases()) != n {
					b.Fatal(err)
				}
			}
		})
	}
	// Beats of two workers in turn, as on a stream that carries many
	// workers' beats: no job id is the last beat's.
	b.Run("leases=10/others", func(b *testing.B) {
		one := heartbeatRequest(10)
		other := heartbeatRequest(10)
		for _, r := range other.Leases {
			r.JobId += "x"
		}
		wires := [2][]byte{marshal(&pb.HeartbeatStreamRequest{Seq: 1, Heartbeat: one}),
			marshal(&pb.HeartbeatStreamRequest{Seq: 2, Heartbeat: other})}
		var into pb.HeartbeatStreamRequest
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := codec.Unmarshal(wires[i&1], &into); err != nil || len(into.GetHeartbeat().GetLeases()) != 10 {
				b.Fatal(err)
			}
			i++
		}
	})
}
