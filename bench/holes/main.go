// Command holes reads a Go heap dump (a node's /debug/heapdump, served with
// pprof on) and tells, size class by size class, how full the spans are:
// the bytes of live objects, the bytes of the spans that hold them, and
// the difference, the holes, per lease when given the number of leases.
// Go's collector does not move objects, so a span that holds one live
// object keeps all its room in use; HeapInuse less HeapAlloc is the sum of
// these holes, and this says which size classes they are in.
//
//	curl -o leader.hdump -H "Authorization: Bearer $ADMIN" http://ADDR/debug/heapdump
//	go run ./bench/holes -leases 1000000 leader.hdump
//
// Spans of one page are counted exactly; a span of several pages is
// inferred from its live objects (its first page may be taken for the page
// of its first live one), so its count may be a little high.
package main

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
)

func main() {
	leases := flag.Float64("leases", 1, "divide every figure by this (the leases the node held)")
	classes := flag.String("classes", filepath.Join(runtime.GOROOT(), "src/internal/runtime/gc/sizeclasses.go"),
		"Go's size class table (the source file of the Go that built the node)")
	top := flag.Int("top", 20, "size classes to print, most holes first")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: holes [-leases N] [-classes FILE] HEAPDUMP")
		os.Exit(2)
	}
	pages, err := loadClasses(*classes)
	if err == nil {
		var f *os.File
		if f, err = os.Open(flag.Arg(0)); err == nil {
			defer f.Close()
			var rep report
			if rep, err = analyze(bufio.NewReaderSize(f, 1<<20), pages); err == nil {
				rep.print(os.Stdout, *leases, *top)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "holes:", err)
		os.Exit(1)
	}
}

// class is what the dump shows of one size class.
type class struct {
	size, objects, spans, spanBytes uint64
}

func (c class) live() uint64  { return c.objects * c.size }
func (c class) holes() uint64 { return c.spanBytes - c.live() }

// report is the dump's small objects by size class and its large ones.
type report struct {
	classes              []class // most holes first
	largeLive, largeSpan uint64
}

func (r report) print(w io.Writer, per float64, top int) {
	fmt.Fprintf(w, "%7s %10s %8s %10s %10s %10s %6s\n", "size", "objects", "spans", "live", "in spans", "holes", "full")
	var live, span uint64
	for i, c := range r.classes {
		live, span = live+c.live(), span+c.spanBytes
		if i < top {
			fmt.Fprintf(w, "%7d %10d %8d %10.1f %10.1f %10.1f %5.1f%%\n", c.size, c.objects, c.spans,
				float64(c.live())/per, float64(c.spanBytes)/per, float64(c.holes())/per, 100*float64(c.live())/float64(c.spanBytes))
		}
	}
	fmt.Fprintf(w, "small objects: %.1f live, %.1f in spans, %.1f holes; large objects: %.1f live, %.1f in spans (per %g)\n",
		float64(live)/per, float64(span)/per, float64(span-live)/per, float64(r.largeLive)/per, float64(r.largeSpan)/per, per)
}

const pageSize = 8192

// The records of a heap dump (runtime/heapdump.go): the objects come after
// the parameters, the itabs and the types they name, and before anything
// else.
const (
	tagObject = 1
	tagType   = 3
	tagParams = 6
	tagItab   = 8
)

var dumpHeader = "go1.7 heap dump\n"

// analyze reads a heap dump's objects. pages is the span size in pages of
// each small size class.
func analyze(r *bufio.Reader, pages map[uint64]uint64) (report, error) {
	var rep report
	hdr := make([]byte, len(dumpHeader))
	if _, err := io.ReadFull(r, hdr); err != nil || string(hdr) != dumpHeader {
		return rep, errors.New("not a Go heap dump")
	}
	var err error
	uv := func() uint64 {
		v, e := readUvarint(r)
		if e != nil && err == nil {
			err = e
		}
		return v
	}
	skip := func() {
		if n := uv(); err == nil {
			_, err = r.Discard(int(n))
		}
	}
	by := map[uint64]*class{}
	var cur *class
	var base, end, prev uint64
	for err == nil {
		switch uv() {
		case tagParams:
			uv()   // big-endian
			uv()   // pointer size
			uv()   // arena start
			uv()   // arena end
			skip() // GOARCH
			skip() // Go version
			uv()   // CPUs
			continue
		case tagType:
			uv()   // address
			uv()   // size
			skip() // name
			uv()   // indirect
			continue
		case tagItab:
			uv()
			uv()
			continue
		case tagObject:
		default:
			if err != nil {
				return rep, err
			}
			for _, c := range by {
				rep.classes = append(rep.classes, *c)
			}
			slices.SortFunc(rep.classes, func(a, b class) int {
				if a.holes() != b.holes() {
					return -cmp.Compare(a.holes(), b.holes())
				}
				return cmp.Compare(a.size, b.size)
			})
			return rep, nil
		}
		addr := uv()
		size := uv()
		if err == nil {
			_, err = r.Discard(int(size))
		}
		for err == nil && uv() != 0 { // the object's pointer fields
			uv()
		}
		np := pages[size]
		if np == 0 { // a large object: a span of its own
			rep.largeLive += size
			rep.largeSpan += (size + pageSize - 1) / pageSize * pageSize
			continue
		}
		c := by[size]
		if c == nil {
			c = &class{size: size}
			by[size] = c
		}
		// The dump lists each span's live objects in address order; an
		// object that cannot be in the span of the one before starts one.
		if c != cur || addr < prev || addr >= end || (addr-base)%size != 0 {
			base = addr &^ (pageSize - 1)
			for b := base; np > 1 && b >= pageSize && addr-b < np*pageSize; b -= pageSize {
				if (addr-b)%size == 0 {
					base = b
				}
			}
			end = base + np*pageSize
			c.spans++
			c.spanBytes += np * pageSize
			cur = c
		}
		prev = addr
		c.objects++
	}
	return rep, err
}

// readUvarint reads one of the dump's varints; a dump that ends inside a
// record is cut short.
func readUvarint(r *bufio.Reader) (uint64, error) {
	v, err := binary.ReadUvarint(r)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return v, err
}

// classRow is a line of the size class table's comment:
// "class  bytes/obj  bytes/span  objects  tail waste  max waste  min align".
var classRow = regexp.MustCompile(`(?m)^//\s+\d+\s+(\d+)\s+(\d+)\s+\d+\s`)

// loadClasses reads the span size, in pages, of every small size class
// from Go's sizeclasses.go.
func loadClasses(path string) (map[uint64]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[uint64]uint64{}
	for _, m := range classRow.FindAllSubmatch(b, -1) {
		size, _ := strconv.ParseUint(string(m[1]), 10, 64)
		span, _ := strconv.ParseUint(string(m[2]), 10, 64)
		out[size] = span / pageSize
	}
	if len(out) < 30 {
		return nil, fmt.Errorf("%s: %d size classes, not Go's table", path, len(out))
	}
	return out, nil
}
