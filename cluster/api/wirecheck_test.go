package api

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// apiMessages is every message of leasehold's API, each filled in (fill).
func apiMessages(t testing.TB) []proto.Message {
	var out []proto.Message
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		if mt.Descriptor().ParentFile().Package() == pb.File_leasehold_v1_workers_proto.Package() {
			m := mt.New()
			fill(m, 0)
			out = append(out, m.Interface())
		}
		return true
	})
	if len(out) < 20 {
		t.Fatalf("found only %d API messages", len(out))
	}
	// The registry ranges in no fixed order: sort, so a run's mutations
	// meet the same messages every time.
	slices.SortFunc(out, func(a, b proto.Message) int {
		return strings.Compare(string(a.ProtoReflect().Descriptor().FullName()), string(b.ProtoReflect().Descriptor().FullName()))
	})
	return out
}

// fill sets every field of m (down to a few levels of nesting) to a valid
// value: enums to a named number other than zero, lists to two elements.
func fill(m protoreflect.Message, depth int) {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.ContainingOneof() != nil && m.WhichOneof(fd.ContainingOneof()) != nil {
			continue
		}
		value := func() (protoreflect.Value, bool) {
			switch fd.Kind() {
			case protoreflect.MessageKind:
				if depth >= 3 {
					return protoreflect.Value{}, false
				}
				var sub protoreflect.Message
				if fd.IsList() {
					sub = m.Mutable(fd).List().NewElement().Message()
				} else {
					sub = m.NewField(fd).Message()
				}
				fill(sub, depth+1)
				return protoreflect.ValueOfMessage(sub), true
			case protoreflect.EnumKind:
				vals := fd.Enum().Values()
				return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1).Number()), true
			case protoreflect.StringKind:
				return protoreflect.ValueOfString("x"), true
			case protoreflect.BytesKind:
				return protoreflect.ValueOfBytes([]byte("xy")), true
			case protoreflect.BoolKind:
				return protoreflect.ValueOfBool(true), true
			case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
				return protoreflect.ValueOfInt32(-7), true
			case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
				return protoreflect.ValueOfInt64(-7), true
			case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
				return protoreflect.ValueOfUint32(7), true
			case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
				return protoreflect.ValueOfUint64(7), true
			case protoreflect.FloatKind:
				return protoreflect.ValueOfFloat32(1.5), true
			case protoreflect.DoubleKind:
				return protoreflect.ValueOfFloat64(1.5), true
			}
			return protoreflect.Value{}, false
		}
		switch {
		case fd.IsMap():
			// No map in the API today; the dynamic message below has one.
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range 2 {
				if v, ok := value(); ok {
					l.Append(v)
				}
			}
		default:
			if v, ok := value(); ok {
				m.Set(fd, v)
			}
		}
	}
}

// testKinds is a proto3 message the API does not have yet, to exercise what
// wireClean must handle anyway: packed repeated enums and numbers, a map
// with enum values, and a message that contains itself.
func testKinds(t testing.TB) protoreflect.MessageDescriptor {
	t.Helper()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	typ := func(k descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto_Type {
		return k.Enum()
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("wirecheck_test.proto"), Package: proto.String("wirechecktest"), Syntax: proto.String("proto3"),
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Color"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("COLOR_UNSET"), Number: proto.Int32(0)}, {Name: proto.String("COLOR_RED"), Number: proto.Int32(1)},
			{Name: proto.String("COLOR_BLUE"), Number: proto.Int32(-3)},
		}}},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Kinds"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("colors"), Number: proto.Int32(1), Label: rep, Type: typ(descriptorpb.FieldDescriptorProto_TYPE_ENUM), TypeName: proto.String(".wirechecktest.Color"), JsonName: proto.String("colors")},
				{Name: proto.String("nums"), Number: proto.Int32(2), Label: rep, Type: typ(descriptorpb.FieldDescriptorProto_TYPE_SINT64), JsonName: proto.String("nums")},
				{Name: proto.String("by_name"), Number: proto.Int32(3), Label: rep, Type: typ(descriptorpb.FieldDescriptorProto_TYPE_MESSAGE), TypeName: proto.String(".wirechecktest.Kinds.ByNameEntry"), JsonName: proto.String("byName")},
				{Name: proto.String("child"), Number: proto.Int32(4), Label: opt, Type: typ(descriptorpb.FieldDescriptorProto_TYPE_MESSAGE), TypeName: proto.String(".wirechecktest.Kinds"), JsonName: proto.String("child")},
				{Name: proto.String("color"), Number: proto.Int32(5), Label: opt, Type: typ(descriptorpb.FieldDescriptorProto_TYPE_ENUM), TypeName: proto.String(".wirechecktest.Color"), JsonName: proto.String("color")},
				{Name: proto.String("ratio"), Number: proto.Int32(6), Label: opt, Type: typ(descriptorpb.FieldDescriptorProto_TYPE_DOUBLE), JsonName: proto.String("ratio")},
				{Name: proto.String("far"), Number: proto.Int32(1000), Label: opt, Type: typ(descriptorpb.FieldDescriptorProto_TYPE_FIXED32), JsonName: proto.String("far")},
			},
			NestedType: []*descriptorpb.DescriptorProto{{
				Name: proto.String("ByNameEntry"), Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
				Field: []*descriptorpb.FieldDescriptorProto{
					{Name: proto.String("key"), Number: proto.Int32(1), Label: opt, Type: typ(descriptorpb.FieldDescriptorProto_TYPE_STRING), JsonName: proto.String("key")},
					{Name: proto.String("value"), Number: proto.Int32(2), Label: opt, Type: typ(descriptorpb.FieldDescriptorProto_TYPE_ENUM), TypeName: proto.String(".wirechecktest.Color"), JsonName: proto.String("value")},
				},
			}},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("Kinds")
}

// kindsMessage is a filled-in testKinds message.
func kindsMessage(t testing.TB) *dynamicpb.Message {
	md := testKinds(t)
	m := dynamicpb.NewMessage(md)
	fields := md.Fields()
	colors := m.Mutable(fields.ByName("colors")).List()
	colors.Append(protoreflect.ValueOfEnum(1))
	colors.Append(protoreflect.ValueOfEnum(-3))
	nums := m.Mutable(fields.ByName("nums")).List()
	nums.Append(protoreflect.ValueOfInt64(-5))
	nums.Append(protoreflect.ValueOfInt64(1 << 40))
	m.Mutable(fields.ByName("by_name")).Map().Set(protoreflect.ValueOfString("a").MapKey(), protoreflect.ValueOfEnum(1))
	child := m.Mutable(fields.ByName("child")).Message()
	child.Set(fields.ByName("color"), protoreflect.ValueOfEnum(-3))
	child.Mutable(fields.ByName("child")).Message().Set(fields.ByName("ratio"), protoreflect.ValueOfFloat64(0.5))
	m.Set(fields.ByName("far"), protoreflect.ValueOfUint32(9))
	return m
}

// TestWireCleanClearsValidRequests: every API message, filled in, and the
// message of every other kind passes the wire check, so decoding skips the
// walk for them; and the walk agrees.
func TestWireCleanClearsValidRequests(t *testing.T) {
	msgs := append(apiMessages(t), kindsMessage(t))
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		md := m.ProtoReflect().Descriptor()
		if !wireClean(b, md) {
			t.Errorf("%s: not clean: % x", md.FullName(), b)
		}
		// Unpacked repeated numbers are valid too (a proto2 writer's form).
		got := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, got); err != nil {
			t.Fatal(err)
		}
		if fe := checkDecoded(got.ProtoReflect(), ""); fe != nil {
			t.Errorf("%s: the walk refuses it: %v", md.FullName(), fe)
		}
	}
	unpacked := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1)
	unpacked = protowire.AppendVarint(protowire.AppendTag(unpacked, 2, protowire.VarintType), protowire.EncodeZigZag(-5))
	if !wireClean(unpacked, testKinds(t)) {
		t.Errorf("unpacked repeated numbers: not clean")
	}
}

// TestWireCleanDeclines: each thing the walk refuses, the wire check does
// not clear, wherever it sits.
func TestWireCleanDeclines(t *testing.T) {
	kinds := testKinds(t)
	beat := marshal(&pb.HeartbeatRequest{WorkerId: "w", Leases: []*pb.LeaseRef{{JobId: "j", Token: 1}}})
	inList := func(inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(beat, 2, protowire.BytesType), inner)
	}
	kindsField := func(num protowire.Number, inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), inner)
	}
	varintField := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	for _, tc := range []struct {
		name string
		md   protoreflect.MessageDescriptor
		b    []byte
	}{
		{"unknown field", (&pb.HeartbeatRequest{}).ProtoReflect().Descriptor(), withUnknown(beat, 99)},
		{"unknown field in a list element", (&pb.HeartbeatRequest{}).ProtoReflect().Descriptor(), inList(withUnknown(marshal(&pb.LeaseRef{JobId: "k"}), 9))},
		{"known number, other wire type", (&pb.HeartbeatRequest{}).ProtoReflect().Descriptor(), inList(protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), "token"))},
		{"unknown enum number", (&pb.ReportRequest{}).ProtoReflect().Descriptor(), marshal(&pb.ReportRequest{Outcome: 9})},
		{"unknown enum number, nested", (&pb.SubmitJobRequest{}).ProtoReflect().Descriptor(), marshal(&pb.SubmitJobRequest{Spec: &pb.JobSpec{Id: "a", OnWorkerLost: 257}})},
		{"forged mark", (&pb.GetJobRequest{}).ProtoReflect().Descriptor(), protowire.AppendBytes(protowire.AppendTag(nil, markNumber, protowire.BytesType), nil)},
		{"unknown number in a packed enum run", kinds, kindsField(1, protowire.AppendVarint(protowire.AppendVarint(nil, 1), 2))},
		{"unknown unpacked enum", kinds, varintField(1, 7)},
		{"unknown enum in a map value", kinds, kindsField(3, varintField(2, 4))},
		{"unknown field two levels down", kinds, kindsField(4, kindsField(4, varintField(77, 1)))},
		{"unknown high field number", kinds, varintField(1001, 1)},
	} {
		if wireClean(tc.b, tc.md) {
			t.Errorf("%s: cleared", tc.name)
		}
	}
	var deep []byte
	for range maxWireDepth + 2 {
		deep = kindsField(4, deep)
	}
	if wireClean(deep, kinds) {
		t.Errorf("a request nested past maxWireDepth: cleared")
	}
}

// TestWireCleanImpliesWalkPasses mutates valid requests at random; whenever
// the decoder accepts the bytes and the wire check clears them, the walk
// must pass the decoded message. It fails if wireClean trusted a field the
// schema does not name, a wire type its kind does not take, or an enum
// number without a name.
func TestWireCleanImpliesWalkPasses(t *testing.T) {
	msgs := append(apiMessages(t), kindsMessage(t))
	rng := rand.New(rand.NewPCG(1, 2))
	var cleared, declined, refused int
	for i := range 20000 {
		m := msgs[i%len(msgs)]
		b := mutate(rng, marshal(m))
		got := m.ProtoReflect().New().Interface()
		if proto.Unmarshal(b, got) != nil {
			continue
		}
		fe := checkDecoded(got.ProtoReflect(), "")
		if fe != nil {
			refused++
		}
		if !wireClean(b, got.ProtoReflect().Descriptor()) {
			declined++
			continue
		}
		cleared++
		if fe != nil {
			t.Fatalf("%s: cleared bytes the walk refuses (%v): % x", got.ProtoReflect().Descriptor().FullName(), fe, b)
		}
	}
	// Both outcomes must have been seen, or the test proved nothing.
	if cleared < 1000 || refused < 1000 {
		t.Fatalf("cleared %d, declined %d, walk refused %d: the mutations did not exercise both outcomes", cleared, declined, refused)
	}
	t.Logf("cleared %d, declined %d, walk refused %d", cleared, declined, refused)
}

// mutate changes b a little: a byte changed, a field of a random number and
// wire type appended, or a varint field inserted in front.
func mutate(rng *rand.Rand, b []byte) []byte {
	b = append([]byte(nil), b...)
	switch rng.IntN(4) {
	case 0:
		if len(b) > 0 {
			b[rng.IntN(len(b))] = byte(rng.IntN(256))
		}
	case 1:
		num := protowire.Number(1 + rng.IntN(20))
		switch rng.IntN(4) {
		case 0:
			b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), uint64(rng.IntN(300)))
		case 1:
			b = protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), strings.Repeat("z", rng.IntN(3)))
		case 2:
			b = protowire.AppendFixed32(protowire.AppendTag(b, num, protowire.Fixed32Type), 1)
		default:
			b = protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), 1)
		}
	case 2:
		head := protowire.AppendVarint(protowire.AppendTag(nil, protowire.Number(1+rng.IntN(12)), protowire.VarintType), uint64(rng.IntN(1<<10)))
		b = append(head, b...)
	default:
		if len(b) > 1 {
			b = b[:rng.IntN(len(b))]
		}
	}
	return b
}
