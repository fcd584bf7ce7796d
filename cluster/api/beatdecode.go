package api

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// decodeBeat decodes one beat of a heartbeat stream into r, as
// proto.Unmarshal followed by the strict check would, but reusing what r
// held from the stream's previous beat: its nested messages, and every
// string whose bytes did not change. A worker names the same id and
// mostly the same leases beat after beat, so a steady stream's beats
// decode without allocating (docs/performance.md).
//
// It takes only the usual shape: seq and heartbeat at most once each, a
// worker id at most once, leases of one job id and one token at most,
// well-formed UTF-8. Anything else (a field it does not name or with
// another wire type, a repeated field that proto would merge or let the
// last one win, progress notes, a malformed varint or length) it
// declines, returning false with r in any state; the general decoder
// then decodes, or refuses, the bytes afresh, resetting r first.
func decodeBeat(b []byte, r *pb.HeartbeatStreamRequest) bool {
	var (
		seq       uint64
		body      []byte
		seqSeen   bool
		beatSeen  bool
		workerRaw []byte
		workerSet bool
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType && !seqSeen:
			seq, n = protowire.ConsumeVarint(b)
			seqSeen = true
		case num == 2 && typ == protowire.BytesType && !beatSeen:
			body, n = protowire.ConsumeBytes(b)
			beatSeen = true
		default:
			return false
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	hb := r.Heartbeat
	var worker string
	var old []*pb.LeaseRef
	if hb != nil {
		worker, old = hb.WorkerId, hb.Leases
	}
	leases := old[:0]
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		body = body[n:]
		v, n := protowire.ConsumeBytes(body)
		if n < 0 {
			return false
		}
		body = body[n:]
		switch {
		case num == 1 && !workerSet:
			if !utf8.Valid(v) {
				return false
			}
			workerRaw, workerSet = v, true
		case num == 2:
			var ref *pb.LeaseRef
			if i := len(leases); i < len(old) {
				ref = old[i] // leases shares old's array: this is that slot
			}
			ref, ok := decodeLeaseRef(v, ref)
			if !ok {
				return false
			}
			leases = append(leases, ref)
		default:
			return false // notes, or a field it does not name
		}
	}
	// The references a shorter beat no longer names are let go: one large
	// beat is not held for the stream's life.
	if len(leases) < len(old) {
		clear(old[len(leases):])
	}
	r.Reset()
	r.Seq = seq
	if !beatSeen {
		return true
	}
	if hb == nil {
		hb = new(pb.HeartbeatRequest)
	}
	hb.Reset()
	hb.WorkerId = reuse(worker, workerRaw)
	if len(leases) > 0 {
		hb.Leases = leases
	}
	r.Heartbeat = hb
	return true
}

// decodeLeaseRef decodes a LeaseRef into ref (a new one when nil), reusing
// its job id when the bytes are unchanged.
func decodeLeaseRef(b []byte, ref *pb.LeaseRef) (*pb.LeaseRef, bool) {
	var (
		job     []byte
		token   uint64
		jobSeen bool
		tokSeen bool
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType && !jobSeen:
			job, n = protowire.ConsumeBytes(b)
			jobSeen = n >= 0 && utf8.Valid(job)
			if !jobSeen {
				return nil, false
			}
		case num == 2 && typ == protowire.VarintType && !tokSeen:
			token, n = protowire.ConsumeVarint(b)
			tokSeen = true
		default:
			return nil, false
		}
		if n < 0 {
			return nil, false
		}
		b = b[n:]
	}
	prev := ""
	if ref == nil {
		ref = new(pb.LeaseRef)
	} else {
		prev = ref.JobId
		ref.Reset()
	}
	ref.JobId, ref.Token = reuse(prev, job), token
	return ref, true
}

// reuse is b as a string: prev when it holds the same bytes, else a copy.
func reuse(prev string, b []byte) string {
	if prev == string(b) {
		return prev
	}
	return string(b)
}
