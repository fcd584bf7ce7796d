package main

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

type rec240 struct{ b [240]byte }

var kept []*rec240

// The test process dumps its own heap holding 20,000 records of 240 bytes
// and finds them, and their spans, in the dump.
func TestAnalyzeOwnHeap(t *testing.T) {
	pages, err := loadClasses(filepath.Join(runtime.GOROOT(), "src/internal/runtime/gc/sizeclasses.go"))
	if err != nil {
		t.Fatal(err)
	}
	if pages[240] != 1 || pages[8] != 1 {
		t.Fatalf("classes of 240 and 8 bytes take %d and %d pages, want 1", pages[240], pages[8])
	}
	const n = 20000
	kept = make([]*rec240, n)
	for i := range kept {
		kept[i] = new(rec240)
	}
	f, err := os.CreateTemp(t.TempDir(), "dump")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	debug.WriteHeapDump(f.Fd())
	runtime.KeepAlive(kept)
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	rep, err := analyze(bufio.NewReader(f), pages)
	if err != nil {
		t.Fatal(err)
	}
	var c class
	for _, x := range rep.classes {
		if x.size == 240 {
			c = x
		}
	}
	if c.objects < n {
		t.Fatalf("%d objects of 240 bytes, want at least %d", c.objects, n)
	}
	// 34 records a page: at least n/34 spans, and not many more.
	if min := uint64(n / 34); c.spans < min || c.spans > min+min/4 {
		t.Errorf("%d spans of 240 bytes for %d objects, want about %d", c.spans, c.objects, min)
	}
	if rep.largeLive < n*8 { // the slice of pointers
		t.Errorf("large objects %d bytes, want at least the %d of the slice", rep.largeLive, n*8)
	}
	var out strings.Builder
	rep.print(&out, n, 3)
	if !strings.Contains(out.String(), "small objects:") {
		t.Errorf("no summary in %q", out.String())
	}
}

func TestAnalyzeRefusesOtherFiles(t *testing.T) {
	if _, err := analyze(bufio.NewReader(strings.NewReader("not a dump at all")), map[uint64]uint64{}); err == nil {
		t.Fatal("read a file that is not a heap dump")
	}
	if _, err := analyze(bufio.NewReader(strings.NewReader(dumpHeader+"\x01\x80")), map[uint64]uint64{}); err == nil {
		t.Fatal("read a dump cut short")
	}
}
