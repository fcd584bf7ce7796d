package api

import (
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The binary decoder's strictness check (checkMessage) walks the decoded
// message through protobuf reflection: every list element becomes a
// reflect.Value and an interface. On the heartbeat path that walk cost
// about as much again as half the decoding (BenchmarkStrictDecodeHeartbeat).
// wireClean proves the same thing from the wire bytes instead, with no
// allocation: when it says clean, the walk would have found nothing; when
// it cannot say so, the walk decides, and it alone words the refusal.

// maxWireDepth bounds wireClean's recursion into nested messages. Deeper
// requests (none of leasehold's) are left to the walk.
const maxWireDepth = 32

// wireClean reports whether b, which proto.Unmarshal accepted as a message
// of md, holds only fields md names, each with a wire type its kind takes,
// and only enum numbers its enums name, at every depth. Then the decoded
// message has no unknown fields (protobuf-go keeps a field of a known
// number but another wire type as unknown) and no unnamed enum value, so
// checkMessage would pass it. false means "not shown", not "refused".
func wireClean(b []byte, md protoreflect.MessageDescriptor) bool {
	return wirePlanOf(md).clean(b, 0)
}

func (plan *wirePlan) clean(b []byte, depth int) bool {
	if depth > maxWireDepth {
		return false
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		f := plan.field(num)
		if f == nil {
			return false
		}
		switch {
		case typ == f.typ:
		case typ == protowire.BytesType && f.packable:
			// A packed run of numbers (proto3's default for repeated scalars).
			v, m := protowire.ConsumeBytes(b)
			if m < 0 || (f.enum != nil && !enumsNamed(v, f.enum)) {
				return false
			}
			b = b[m:]
			continue
		default:
			return false
		}
		switch {
		case f.enum != nil:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 || f.enum.Values().ByNumber(protoreflect.EnumNumber(int32(v))) == nil {
				return false
			}
			b = b[m:]
		case f.msg != nil:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 || !f.msg.clean(v, depth+1) {
				return false
			}
			b = b[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return false
			}
			b = b[m:]
		}
	}
	return true
}

// enumsNamed reports whether every varint of a packed run is a number ed
// names.
func enumsNamed(b []byte, ed protoreflect.EnumDescriptor) bool {
	for len(b) > 0 {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 || ed.Values().ByNumber(protoreflect.EnumNumber(int32(v))) == nil {
			return false
		}
		b = b[n:]
	}
	return true
}

// wirePlan is what wireClean needs to know of one message type's fields,
// worked out once per type.
type wirePlan struct {
	low  []wireField // by field number, for numbers below len(low)
	high map[protowire.Number]*wireField
}

type wireField struct {
	known    bool
	typ      protowire.Type // the wire type of one value of the field's kind
	packable bool           // a repeated number: a packed run is accepted too
	enum     protoreflect.EnumDescriptor
	msg      *wirePlan // a message's, or a map entry's, fields
}

// field returns what the plan knows of field num, nil for a number the
// message does not name.
func (p *wirePlan) field(num protowire.Number) *wireField {
	if num >= 0 && int(num) < len(p.low) {
		if f := &p.low[num]; f.known {
			return f
		}
		return nil
	}
	return p.high[num]
}

// wirePlans caches plans by message descriptor (descriptors of generated
// types live as long as the program, so the cache is bounded by the
// schema). A plan holds its nested messages' plans, so a request costs one
// lookup here however deep it is.
var (
	wirePlans    sync.Map // protoreflect.MessageDescriptor -> *wirePlan
	wirePlanning sync.Mutex
)

func wirePlanOf(md protoreflect.MessageDescriptor) *wirePlan {
	if p, ok := wirePlans.Load(md); ok {
		return p.(*wirePlan)
	}
	wirePlanning.Lock()
	defer wirePlanning.Unlock()
	building := map[protoreflect.MessageDescriptor]*wirePlan{}
	p := buildWirePlan(md, building)
	// Published only once complete: a plan under construction is never read.
	// The mutex is held, so no other plan for these types can appear meanwhile.
	for d, q := range building {
		wirePlans.Store(d, q)
	}
	return p
}

// buildWirePlan makes md's plan and those of the messages below it that
// have none yet; building holds the plans being made, which is how a
// message that contains itself finds its own.
func buildWirePlan(md protoreflect.MessageDescriptor, building map[protoreflect.MessageDescriptor]*wirePlan) *wirePlan {
	if p, ok := wirePlans.Load(md); ok {
		return p.(*wirePlan)
	}
	if p := building[md]; p != nil {
		return p
	}
	p := &wirePlan{high: map[protowire.Number]*wireField{}}
	building[md] = p
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := wireField{known: true}
		switch fd.Kind() {
		case protoreflect.BoolKind, protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind,
			protoreflect.Uint64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind:
			f.typ = protowire.VarintType
		case protoreflect.EnumKind:
			f.typ, f.enum = protowire.VarintType, fd.Enum()
		case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
			f.typ = protowire.Fixed32Type
		case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
			f.typ = protowire.Fixed64Type
		case protoreflect.StringKind, protoreflect.BytesKind:
			f.typ = protowire.BytesType
		case protoreflect.MessageKind:
			f.typ, f.msg = protowire.BytesType, buildWirePlan(fd.Message(), building)
		default:
			continue // groups: left unknown here, so the walk decides
		}
		f.packable = fd.IsList() && f.typ != protowire.BytesType
		if num := fd.Number(); num < 64 {
			for int(num) >= len(p.low) {
				p.low = append(p.low, wireField{})
			}
			p.low[num] = f
		} else {
			p.high[num] = &f
		}
	}
	return p
}
