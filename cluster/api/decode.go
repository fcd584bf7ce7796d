package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

// Requests are decoded strictly: a field or an enum value the schema does
// not name is refused, in JSON and in binary alike, rather than dropped into
// a default (a misspelt lost policy must not become REQUEUE). Connect's own
// codecs drop unknown JSON fields and enum names, and Connect answers a
// codec's error itself, without our ErrorDetail, before any interceptor of a
// unary call runs. So strictCodec never fails a request message: it empties
// it and marks it with the refusal, and refuseMarked, the innermost
// interceptor, answers the mark before any handler sees the message. A
// client cannot forge a mark: the mark is an unknown field, and the codec
// replaces every unknown field a client sends with its own refusal.

// strictDecoding is the handler options that make every service decode
// strictly: the codecs for each name Connect and gRPC look codecs up by,
// and the interceptor that answers their refusals.
func strictDecoding() connect.HandlerOption {
	return connect.WithHandlerOptions(
		connect.WithCodec(strictCodec{name: "proto"}),
		connect.WithCodec(strictCodec{name: "json", json: true}),
		connect.WithCodec(strictCodec{name: "json; charset=utf-8", json: true}),
		connect.WithInterceptors(refuseMarked{}),
	)
}

// strictCodec decodes strictly and encodes as Connect's default codecs do
// (protojson with default options: lowerCamelCase names, unpopulated fields
// left out).
type strictCodec struct {
	name string
	json bool
}

func (c strictCodec) Name() string   { return c.name }
func (c strictCodec) IsBinary() bool { return !c.json }

func (c strictCodec) Marshal(v any) ([]byte, error) { return c.MarshalAppend(nil, v) }

func (c strictCodec) MarshalAppend(dst []byte, v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", v)
	}
	if c.json {
		return protojson.MarshalOptions{}.MarshalAppend(dst, m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

func (c strictCodec) MarshalStable(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", v)
	}
	if !c.json {
		return proto.MarshalOptions{Deterministic: true}.Marshal(m)
	}
	b, err := protojson.MarshalOptions{}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Unmarshal decodes b into v, or empties v and marks it with why it was
// refused; it fails only for a v that is not a protobuf message.
func (c strictCodec) Unmarshal(b []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", v)
	}
	if err := c.decode(b, m); err != nil {
		mark(m, err)
	}
	return nil
}

func (c strictCodec) decode(b []byte, m proto.Message) error {
	if !c.json {
		if r, ok := m.(*pb.HeartbeatStreamRequest); ok && decodeBeat(b, r) {
			return nil // the usual beat, decoded in place (beatdecode.go)
		}
		return c.decodeGeneral(b, m)
	}
	if len(b) == 0 {
		return rules.Invalid("request", "zero-length payload is not a valid JSON object")
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(b, m); err != nil {
		// protojson says what it refused only in its message; find the
		// field in the document itself rather than parse that.
		if ferr := jsonFault(b, m.ProtoReflect().Descriptor(), ""); ferr != nil {
			return ferr
		}
		return rules.Invalid("request", "%s", clipText(err.Error()))
	}
	// protojson takes an enum's number as well as its name.
	return checkDecoded(m.ProtoReflect(), "")
}

// decodeGeneral decodes binary b into m, any message, afresh (m is reset
// first), and refuses what the schema does not name.
func (c strictCodec) decodeGeneral(b []byte, m proto.Message) error {
	if err := proto.Unmarshal(b, m); err != nil {
		return rules.Invalid("request", "%s", clipText(err.Error()))
	}
	pm := m.ProtoReflect()
	if wireClean(b, pm.Descriptor()) {
		return nil // what checkDecoded would find, shown from the bytes (wirecheck.go)
	}
	return checkDecoded(pm, "")
}

// checkDecoded refuses what a decoded message holds that its schema does
// not name: unknown fields (the binary decoder keeps them as bytes) and
// enum numbers without a name (proto3 enums are open), at any depth. path
// is the message's field path in the request, "" at the top.
func checkDecoded(m protoreflect.Message, path string) error {
	fe := checkMessage(m)
	if fe == nil {
		return nil
	}
	fe.Field = join(path, fe.Field)
	return fe
}

// checkMessage is checkDecoded's walk. The refusal's field path, relative
// to m, is built on the way back out, so a request that passes (every
// request on the heartbeat path) costs no path strings at all.
func checkMessage(m protoreflect.Message) *rules.FieldError {
	if u := m.GetUnknown(); len(u) > 0 {
		num, _, _ := protowire.ConsumeTag(u)
		return &rules.FieldError{Field: strconv.Itoa(int(num)), Reason: fmt.Sprintf("unknown field number %d of %s", num, m.Descriptor().FullName())}
	}
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.Enum() == nil && fd.Message() == nil || !m.Has(fd) {
			continue // scalars (a map's field is a message) decode valid
		}
		var fe *rules.FieldError
		switch v := m.Get(fd); {
		case fd.IsList():
			for i, l := 0, v.List(); i < l.Len() && fe == nil; i++ {
				fe = checkValue(fd, l.Get(i))
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				fe = checkValue(fd.MapValue(), mv)
				return fe == nil
			})
		default:
			fe = checkValue(fd, v)
		}
		if fe != nil {
			fe.Field = inside(string(fd.Name()), fe.Field)
			return fe
		}
	}
	return nil
}

// checkValue refuses a value of fd's kind that the schema does not name;
// the refusal's Field is the path below fd ("" for the value itself).
func checkValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) *rules.FieldError {
	switch {
	case fd.Enum() != nil:
		if fd.Enum().Values().ByNumber(v.Enum()) == nil {
			return &rules.FieldError{Reason: fmt.Sprintf("unknown value %d of %s", v.Enum(), fd.Enum().FullName())}
		}
	case fd.Message() != nil:
		return checkMessage(v.Message())
	}
	return nil
}

// inside is the path below a field named name: name, then rest if any.
func inside(name, rest string) string {
	if rest == "" {
		return name
	}
	return name + "." + rest
}

// jsonFault finds, in a JSON document strict protojson refused, a key that
// names no field of md or an enum name that is not one of its enum's, and
// returns the refusal naming it; nil when the fault is something else.
// Keys are looked up as protojson does: the JSON name, then the proto name.
func jsonFault(b []byte, md protoreflect.MessageDescriptor, path string) error {
	if md.ParentFile().Package() == "google.protobuf" {
		return nil // well-known types have JSON forms of their own
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) != nil {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByTextName(k)
		}
		if fd == nil {
			return rules.Invalid(join(path, keyName(k)), "unknown field")
		}
		name := join(path, string(fd.Name()))
		// Values of the wrong shape are protojson's to name.
		var values []json.RawMessage
		switch {
		case fd.IsList():
			json.Unmarshal(obj[k], &values)
		case fd.IsMap():
			var m map[string]json.RawMessage
			json.Unmarshal(obj[k], &m)
			values = slices.Collect(maps.Values(m))
			fd = fd.MapValue()
		default:
			values = []json.RawMessage{obj[k]}
		}
		for _, v := range values {
			if err := jsonValueFault(fd, v, name); err != nil {
				return err
			}
		}
	}
	return nil
}

func jsonValueFault(fd protoreflect.FieldDescriptor, v json.RawMessage, name string) error {
	switch {
	case fd.Enum() != nil:
		// A name; a number is checked after decoding, null means unset.
		var s string
		if bytes.HasPrefix(bytes.TrimSpace(v), []byte(`"`)) && json.Unmarshal(v, &s) == nil &&
			fd.Enum().Values().ByName(protoreflect.Name(s)) == nil {
			return rules.Invalid(name, "unknown value %q of %s", clipText(s), fd.Enum().FullName())
		}
	case fd.Message() != nil:
		return jsonFault(v, fd.Message(), name)
	}
	return nil
}

// join appends a field name to a path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// keyName is a JSON key as a field name in a refusal: as it is when it
// could be a field's name, quoted and cut short otherwise.
func keyName(k string) string {
	if rules.CheckName("key", k) == nil {
		return k
	}
	if len(k) > rules.MaxNameLen {
		k = k[:rules.MaxNameLen] + "..."
	}
	return strconv.Quote(k)
}

// clipText bounds a decoder's message, which may quote the request.
func clipText(s string) string {
	if len(s) > rules.MaxMessageLen/4 {
		return strconv.Quote(s[:rules.MaxMessageLen/4]) + "..."
	}
	return s
}

// The mark: one unknown field, at the highest field number, holding the
// refusal's field (1) and reason (2).
const markNumber = protowire.MaxValidNumber

func mark(m proto.Message, err error) {
	fe, ok := err.(*rules.FieldError)
	if !ok {
		fe = &rules.FieldError{Field: "request", Reason: err.Error()}
	}
	var rec []byte
	rec = protowire.AppendTag(rec, 1, protowire.BytesType)
	rec = protowire.AppendString(rec, fe.Field)
	rec = protowire.AppendTag(rec, 2, protowire.BytesType)
	rec = protowire.AppendString(rec, fe.Reason)
	var b []byte
	b = protowire.AppendTag(b, markNumber, protowire.BytesType)
	b = protowire.AppendBytes(b, rec)
	proto.Reset(m)
	m.ProtoReflect().SetUnknown(b)
}

// refusalOf returns the refusal a request message was marked with, or nil.
// Any other unknown bytes are refused too: only the codec leaves any.
func refusalOf(v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return nil
	}
	u := m.ProtoReflect().GetUnknown()
	if len(u) == 0 {
		return nil
	}
	num, typ, n := protowire.ConsumeTag(u)
	if n < 0 || num != markNumber || typ != protowire.BytesType {
		return rules.Invalid("request", "unknown fields")
	}
	rec, _ := protowire.ConsumeBytes(u[n:])
	fe := &rules.FieldError{Field: "request", Reason: "refused"}
	for len(rec) > 0 {
		num, typ, n := protowire.ConsumeTag(rec)
		if n < 0 || typ != protowire.BytesType {
			break
		}
		s, size := protowire.ConsumeString(rec[n:])
		if size < 0 {
			break
		}
		switch num {
		case 1:
			fe.Field = s
		case 2:
			fe.Reason = s
		}
		rec = rec[n+size:]
	}
	return fe
}

// refuseMarked answers a request the codec marked, before the handler runs.
type refuseMarked struct{}

func (refuseMarked) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := refusalOf(req.Any()); err != nil {
			return nil, toWire(err)
		}
		return next(ctx, req)
	}
}

func (refuseMarked) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (refuseMarked) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, markedConn{conn})
	}
}

// markedConn refuses a marked message of a stream as it is received.
type markedConn struct{ connect.StreamingHandlerConn }

func (c markedConn) Receive(v any) error {
	if err := c.StreamingHandlerConn.Receive(v); err != nil {
		return err
	}
	if err := refusalOf(v); err != nil {
		return toWire(err)
	}
	return nil
}
