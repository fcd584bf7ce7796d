package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// profile is what cpusplit reads of a pprof profile: each sample's stack
// (function names, leaf first, inlined frames included) and its CPU time.
type profile struct {
	samples  []sample
	total    time.Duration
	duration time.Duration // the profile's own, zero if it has none
}

type sample struct {
	stack []string
	cpu   time.Duration
}

// The fields of profile.proto (github.com/google/pprof's
// proto/profile.proto) that cpusplit reads.
const (
	profSampleType    = 1  // repeated ValueType
	profSample        = 2  // repeated Sample
	profLocation      = 4  // repeated Location
	profFunction      = 5  // repeated Function
	profStringTable   = 6  // repeated string
	profDurationNanos = 10 // int64

	valueType = 1 // ValueType.type, an index into the string table
	valueUnit = 2 // ValueType.unit

	sampleLocationID = 1 // packed uint64
	sampleValue      = 2 // packed int64

	locationID   = 1 // uint64
	locationLine = 4 // repeated Line

	lineFunctionID = 1 // uint64

	functionID   = 1 // uint64
	functionName = 2 // int64, an index into the string table
)

// maxProfileBytes bounds a profile, as read and once unzipped: a CPU
// profile of a minute is a few MiB. A variable for the tests.
var maxProfileBytes = 256 << 20

// readProfile reads a profile's file, refusing one over maxProfileBytes.
func readProfile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, int64(maxProfileBytes)+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxProfileBytes {
		return nil, fmt.Errorf("%s: more than %d bytes", file, maxProfileBytes)
	}
	return raw, nil
}

// parseProfile reads a gzipped (or plain) pprof profile and keeps the
// CPU time of each sample, in nanoseconds: the value whose type is "cpu".
func parseProfile(raw []byte) (*profile, error) {
	if len(raw) > 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		z, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		if raw, err = io.ReadAll(io.LimitReader(z, int64(maxProfileBytes)+1)); err != nil {
			return nil, err
		}
		if len(raw) > maxProfileBytes {
			return nil, fmt.Errorf("more than %d bytes unzipped", maxProfileBytes)
		}
	}
	var (
		strs       []string
		types      [][2]uint64 // (type, unit) string indexes
		rawSamples [][]byte
		funcs      = map[uint64]uint64{}   // function id: name's string index
		locs       = map[uint64][]uint64{} // location id: function ids, leaf (innermost inlined) first
		duration   int64
	)
	err := fields(raw, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == profStringTable && typ == protowire.BytesType:
			strs = append(strs, string(v))
		case num == profSampleType && typ == protowire.BytesType:
			var t [2]uint64
			err := fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
				if typ == protowire.VarintType && (num == valueType || num == valueUnit) {
					t[num-1] = n
				}
				return nil
			})
			types = append(types, t)
			return err
		case num == profSample && typ == protowire.BytesType:
			rawSamples = append(rawSamples, v)
		case num == profFunction && typ == protowire.BytesType:
			var id, name uint64
			err := fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
				switch {
				case num == functionID && typ == protowire.VarintType:
					id = n
				case num == functionName && typ == protowire.VarintType:
					name = n
				}
				return nil
			})
			funcs[id] = name
			return err
		case num == profLocation && typ == protowire.BytesType:
			var id uint64
			var fns []uint64
			err := fields(v, func(num protowire.Number, typ protowire.Type, line []byte, n uint64) error {
				switch {
				case num == locationID && typ == protowire.VarintType:
					id = n
				case num == locationLine && typ == protowire.BytesType:
					return fields(line, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
						if num == lineFunctionID && typ == protowire.VarintType {
							fns = append(fns, n)
						}
						return nil
					})
				}
				return nil
			})
			locs[id] = fns
			return err
		case num == profDurationNanos && typ == protowire.VarintType:
			duration = int64(n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	str := func(i uint64) string {
		if i < uint64(len(strs)) {
			return strs[i]
		}
		return ""
	}
	cpu := -1
	for i, t := range types {
		if str(t[0]) == "cpu" && str(t[1]) == "nanoseconds" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, errors.New("not a CPU profile: no sample type cpu/nanoseconds")
	}
	p := &profile{duration: time.Duration(duration)}
	for _, raw := range rawSamples {
		var ids []uint64
		var values []int64
		err := fields(raw, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
			switch num {
			case sampleLocationID:
				return varints(typ, v, n, func(x uint64) { ids = append(ids, x) })
			case sampleValue:
				return varints(typ, v, n, func(x uint64) { values = append(values, int64(x)) })
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if cpu >= len(values) {
			return nil, fmt.Errorf("a sample with %d values, %d sample types", len(values), len(types))
		}
		s := sample{cpu: time.Duration(values[cpu])}
		for _, id := range ids {
			for _, fn := range locs[id] {
				s.stack = append(s.stack, str(funcs[fn]))
			}
		}
		p.samples = append(p.samples, s)
		p.total += s.cpu
	}
	return p, nil
}

// fields calls fn for each field of a message: its number and type, and
// its bytes (length-delimited) or its value (varint, fixed).
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var (
			v []byte
			x uint64
		)
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// varints calls fn for each value of a repeated varint field, packed (v)
// or not (n).
func varints(typ protowire.Type, v []byte, n uint64, fn func(uint64)) error {
	if typ == protowire.VarintType {
		fn(n)
		return nil
	}
	if typ != protowire.BytesType {
		return fmt.Errorf("a repeated number of wire type %d", typ)
	}
	for len(v) > 0 {
		x, k := protowire.ConsumeVarint(v)
		if k < 0 {
			return protowire.ParseError(k)
		}
		fn(x)
		v = v[k:]
	}
	return nil
}
