package fsm

import (
	"encoding/binary"
	"fmt"
)

// The codec is a small hand-written binary format: uvarints, zig-zag varints
// and length-prefixed strings, in a fixed field order per record. It is
// deterministic (the same value always encodes to the same bytes), which the
// state hash relies on, and every length is checked against a bound before
// anything is allocated.

// encoder appends to a byte slice.
type encoder struct {
	b []byte
	// codec is the command codec version being written (commands only):
	// a field added in a version is written only from it on.
	codec byte
}

func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) byte1(v uint8)    { e.b = append(e.b, v) }

func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *encoder) str(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) bytes(p []byte) {
	e.uvarint(uint64(len(p)))
	e.b = append(e.b, p...)
}

func (e *encoder) strs(list []string) {
	e.uvarint(uint64(len(list)))
	for _, s := range list {
		e.str(s)
	}
}

// decoder reads what encoder wrote. The first error sticks: later reads
// return zero values, and err reports it once at the end.
type decoder struct {
	b   []byte
	off int
	err error
	// codec is the command codec version being read (commands only): a
	// field added in a version is read only from it on.
	codec byte
	// kept, when set, holds the last string read for each field that
	// records in a row mostly repeat (a snapshot's jobs share their queue,
	// the leases of one acquire its worker and request id): see keptStr.
	kept *keptStrings
	// known, when set, is the state the command read is about to be
	// applied to: a name or id it already holds (a worker's id, a queue's
	// name, a kept job's id) is returned as the state's own string, and
	// nothing is allocated for it (heldStr).
	known *state
}

// keptStrings are the fields whose last string a snapshot's reader keeps.
type keptStrings [nKept]string

const (
	keptQueue = iota
	keptKind
	keptSubmitter
	keptWorker
	keptRequest
	nKept
)

// heldJob is the field of a job id, for heldStr: the state's copy is
// looked up, never kept (no two jobs share an id).
const heldJob = nKept

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrCorrupt, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) byte1() uint8 {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated")
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) bool() bool {
	switch v := d.byte1(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("bad bool %d", v)
		return false
	}
}

func (d *decoder) u32() uint32 {
	v := d.uvarint()
	if v > 1<<32-1 {
		d.fail("uint32 overflow")
		return 0
	}
	return uint32(v)
}

func (d *decoder) i32() int32 {
	v := d.varint()
	if v < -1<<31 || v > 1<<31-1 {
		d.fail("int32 overflow")
		return 0
	}
	return int32(v)
}

// span returns the next length-prefixed run of at most max bytes, aliasing
// the input.
func (d *decoder) span(max int) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(max) {
		d.fail("length %d exceeds %d", n, max)
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("truncated")
		return nil
	}
	p := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return p
}

func (d *decoder) str(max int) string { return string(d.span(max)) }

// keptStr reads a string of the field f. When the decoder keeps strings
// and the bytes equal the last string kept for f, it returns that string
// and allocates nothing: a million leases restored from a snapshot share
// their acquires' hundred thousand request ids, as they did in the state
// that wrote it, and no queue or worker name is allocated only to be
// thrown away for the state's interned copy.
func (d *decoder) keptStr(f int, max int) string {
	p := d.span(max)
	if v, ok := d.held(f, p); ok {
		return v
	}
	if d.kept == nil {
		return string(p)
	}
	if last := d.kept[f]; string(p) == last {
		return last
	}
	v := string(p)
	d.kept[f] = v
	return v
}

// heldStr reads a string of the field f (keptQueue, keptKind,
// keptSubmitter, keptWorker or heldJob). When the decoder knows the state
// and the state holds that string, it returns the state's copy: a report
// names a worker and a job the state has, and a copy of each, allocated
// on every replica, would only be thrown away.
func (d *decoder) heldStr(f int, max int) string {
	p := d.span(max)
	if v, ok := d.held(f, p); ok {
		return v
	}
	return string(p)
}

// held is the state's copy of p, a string of the field f, when the
// decoder knows the state and the state holds one.
func (d *decoder) held(f int, p []byte) (string, bool) {
	if d.known == nil {
		return "", false
	}
	return d.known.held(f, p)
}

// bytes copies, so the result does not pin the whole input in memory.
func (d *decoder) bytes(max int) []byte {
	p := d.span(max)
	if len(p) == 0 {
		return nil
	}
	return append([]byte(nil), p...)
}

// strs reads a list of strings of the field f, as heldStr does.
func (d *decoder) strs(f, maxItems, maxLen int) []string {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(maxItems) {
		d.fail("list of %d exceeds %d", n, maxItems)
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		out = append(out, d.heldStr(f, maxLen))
	}
	return out
}

// count reads a list length, refusing more than max items or more items
// than there are bytes left (each item takes at least one byte).
func (d *decoder) count(max int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(max) || n > uint64(len(d.b)-d.off) {
		d.fail("list of %d exceeds its bound", n)
		return 0
	}
	return int(n)
}

// done fails on trailing bytes and returns the sticky error.
func (d *decoder) done() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d trailing bytes", len(d.b)-d.off)
	}
	return d.err
}
