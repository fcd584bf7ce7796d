package api

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// decodeBeat decodes one beat of a heartbeat stream into r, as
// proto.Unmarshal followed by the strict check would, but reusing what r
// held from the stream's previous beat: its nested messages, its worker id
// if unchanged, and its job ids if it names as many leases and none
// changed. A worker names the same id and mostly the same leases beat
// after beat, so a steady stream's beats decode without allocating
// (docs/performance-history.md).
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
	// The leases are read first (into scratch, on the stack for a beat of
	// up to 16), so that what they need anew is made in one allocation
	// each: the references beyond those of the last beat in one block,
	// and the job ids, unless they are the last beat's, as many and each
	// the same, in one string that each id is a part of. A slot's ids are
	// then one beat's, kept together: the heartbeat streams' beats held
	// for reuse do not scatter small strings among the API's garbage
	// (docs/performance-history.md, "Where the leader's holes are"). What else
	// holds a beat's ids (the beat's refs, the stream's answer and its
	// result) lets them go when it is next used: a beat kept for reuse
	// holds its own last ids only, and nothing holds another beat's.
	var scratch [16]rawRef
	raws := scratch[:0]
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
			ref, ok := readLeaseRef(v)
			if !ok {
				return false
			}
			raws = append(raws, ref)
		default:
			return false // notes, or a field it does not name
		}
	}
	if len(old) > 16 && len(raws)*4 < len(old) {
		// Much shorter than a long last beat: start afresh, so that the
		// blocks of a long beat's refs are not kept for a few of them (a
		// few refs, up to 16, are kept for the next beats, as before).
		old = nil
	}
	same, size := len(raws) == len(old), 0
	for i, raw := range raws {
		size += len(raw.job)
		same = same && old[i].JobId == string(raw.job)
	}
	var ids string
	if !same && size > 0 {
		var sb strings.Builder
		sb.Grow(size)
		for _, raw := range raws {
			sb.Write(raw.job)
		}
		ids = sb.String()
	}
	var fresh []pb.LeaseRef
	if len(raws) > len(old) {
		fresh = make([]pb.LeaseRef, len(raws)-len(old))
	}
	leases, at := old[:0], 0
	for i, raw := range raws {
		var ref *pb.LeaseRef
		if i < len(old) {
			ref = old[i] // leases shares old's array: this is that slot
		} else {
			ref = &fresh[i-len(old)]
		}
		id := ref.JobId
		if !same {
			id, at = ids[at:at+len(raw.job)], at+len(raw.job)
		}
		ref.Reset()
		ref.JobId, ref.Token = id, raw.token
		leases = append(leases, ref)
	}
	// The references a shorter beat no longer names are let go, and
	// emptied, since their block may be kept for the others: neither they
	// nor the last beat's ids are held for the stream's life.
	if len(leases) < len(old) {
		for _, ref := range old[len(leases):] {
			ref.Reset()
		}
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

// rawRef is a LeaseRef as read off the wire: its job id still the
// message's bytes.
type rawRef struct {
	job   []byte
	token uint64
}

// readLeaseRef reads a LeaseRef: its job id (valid UTF-8) and token, each
// at most once.
func readLeaseRef(b []byte) (rawRef, bool) {
	var (
		ref     rawRef
		jobSeen bool
		tokSeen bool
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return rawRef{}, false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType && !jobSeen:
			ref.job, n = protowire.ConsumeBytes(b)
			jobSeen = n >= 0 && utf8.Valid(ref.job)
			if !jobSeen {
				return rawRef{}, false
			}
		case num == 2 && typ == protowire.VarintType && !tokSeen:
			ref.token, n = protowire.ConsumeVarint(b)
			tokSeen = true
		default:
			return rawRef{}, false
		}
		if n < 0 {
			return rawRef{}, false
		}
		b = b[n:]
	}
	return ref, true
}

// reuse is b as a string: prev when it holds the same bytes, else a copy.
func reuse(prev string, b []byte) string {
	if prev == string(b) {
		return prev
	}
	return string(b)
}
