package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

func TestCause(t *testing.T) {
	for _, c := range []struct {
		stack []string
		want  string
	}{
		// A socket write counts for the sockets, not for the system call.
		{[]string{"internal/runtime/syscall/linux.Syscall6", "syscall.RawSyscall6", "syscall.write", "internal/poll.(*FD).Write", "net.(*netFD).Write", "bufio.(*Writer).Flush", "net/http.(*http2serverConn).Flush"}, "net (sockets)"},
		// An allocation counts for the code that allocated.
		{[]string{"runtime.mallocgc", "runtime.newobject", "connectrpc.com/connect.(*Handler).ServeHTTP", "net/http.(*http2serverConn).runHandler"}, "Connect"},
		{[]string{"runtime.selectgo", "github.com/leasehold/leasehold/cluster/api.(*Server).serveHeartbeats"}, "leasehold: cluster/api (the API's handlers)"},
		{[]string{"github.com/leasehold/leasehold/cluster.(*Node).Heartbeat"}, "leasehold: cluster (the node, checks, expiry)"},
		{[]string{"github.com/leasehold/leasehold/fsm.applyAcquire", "github.com/hashicorp/raft.(*Raft).runFSM"}, "leasehold: fsm (the state machine)"},
		{[]string{"syscall.Fsync", "github.com/hashicorp/raft-wal/segment.(*Writer).sync"}, "raft-wal (the log store)"},
		{[]string{"github.com/hashicorp/raft.(*Raft).leaderLoop"}, "raft"},
		{[]string{"vendor/golang.org/x/net/http2/hpack.(*Decoder).parseFieldIndexed"}, "net/http (HTTP/2)"},
		{[]string{"golang.org/x/sys/unix.ClockGettime", "github.com/leasehold/leasehold/clock.Boot"}, "leasehold: clock (the suspend-aware clock's reads)"},
		// The runtime alone: the collector, the scheduler.
		{[]string{"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker"}, "the runtime alone (the collector, the scheduler)"},
		// Any other package by its path.
		{[]string{"runtime.memmove", "example.com/some/pkg.(*T).Do", "main.main"}, "example.com/some/pkg"},
		{[]string{"main.burn"}, "main"},
		{[]string{"github.com/benbjohnson/immutable.(*SortedMapIterator[go.shape.uint64,go.shape.struct { github.com/hashicorp/raft-wal/types.SegmentInfo }]).Next"}, "github.com/benbjohnson/immutable"},
		{[]string{"unique.Handle[go.shape.struct { net/netip.isV6 bool }].Value"}, "unique"},
		// Assembly routines count for their caller.
		{[]string{"countbody", "strings.Count", "net/url.parseQuery"}, "net/http (HTTP/2)"},
	} {
		if got := cause(c.stack); got != c.want {
			t.Errorf("cause(%v) = %q, want %q", c.stack, got, c.want)
		}
	}
}

func TestGoroutine(t *testing.T) {
	for _, c := range []struct {
		stack []string
		want  string
	}{
		{[]string{"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker", "runtime.goexit"}, "the collector"},
		{[]string{"syscall.Fsync", "github.com/hashicorp/raft.(*LogCache).StoreLogs", "github.com/hashicorp/raft.(*Raft).dispatchLogs", "github.com/hashicorp/raft.(*Raft).leaderLoop", "github.com/hashicorp/raft.(*Raft).runLeader", "github.com/hashicorp/raft.(*Raft).run", "github.com/hashicorp/raft.(*raftState).goFunc.func1", "runtime.goexit"}, "raft: the main loop (the log's write and sync, commits)"},
		{[]string{"github.com/leasehold/leasehold/fsm.applyAcquire", "github.com/hashicorp/raft.(*Raft).runFSM.func1", "github.com/hashicorp/raft.(*Raft).runFSM", "github.com/hashicorp/raft.(*raftState).goFunc.func1"}, "raft: the state machine's apply"},
		{[]string{"connectrpc.com/connect.(*Handler).ServeHTTP", "net/http.(*http2serverConn).runHandler", "runtime.goexit"}, "API handlers (Connect, leasehold and the cluster below)"},
		{[]string{"net.(*conn).Read", "net/http.(*http2serverConn).readFrames", "runtime.goexit"}, "HTTP/2 server: each connection's loop, frame reads and writes"},
		{[]string{"github.com/leasehold/leasehold/cluster/api.(*Server).readBeats", "github.com/leasehold/leasehold/cluster/api.(*Server).serveHeartbeats.func1", "runtime.goexit"}, "heartbeat streams: the readers of beats"},
		{[]string{"runtime.findRunnable", "runtime.schedule", "runtime.park_m", "runtime.mcall"}, "the scheduler (finding work, parking)"},
		{[]string{"main.burn", "main.main", "runtime.main"}, "other"},
	} {
		if got := goroutine(c.stack); got != c.want {
			t.Errorf("goroutine(%v) = %q, want %q", c.stack, got, c.want)
		}
	}
}

//go:noinline
func burn(n int) int {
	x := 0
	for i := range n {
		x ^= i * 2654435761
	}
	return x
}

var sink int

// TestRealProfile profiles this process while it spins in burn and
// splits the profile: burn's package, under bench, has most of the
// samples.
func TestRealProfile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cpu.prof")
	var p *profile
	for try := 0; ; try++ {
		f, err := os.Create(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
			sink += burn(1 << 16)
		}
		pprof.StopCPUProfile()
		f.Close()
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if p, err = parseProfile(raw); err != nil {
			t.Fatal(err)
		}
		if p.total >= 100*time.Millisecond || try == 20 {
			break
		}
	}
	if p.total < 100*time.Millisecond || p.duration <= 0 {
		t.Fatalf("%d samples, %s of CPU in %s", len(p.samples), p.total, p.duration)
	}
	var burned time.Duration
	for _, s := range p.samples {
		if len(s.stack) > 0 && s.stack[0] == "github.com/leasehold/leasehold/bench/cpusplit.burn" {
			burned += s.cpu
		}
	}
	rows := split(p, cause)
	if rows[0].name != "leasehold: bench" || rows[0].cpu < p.total/2 || burned < p.total/2 {
		t.Fatalf("split by cause: %v (burn's own samples %s of %s)", rows, burned, p.total)
	}
	var out bytes.Buffer
	if err := splitFile(&out, file, 16); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"by cause", "by goroutine", "% of a core", "leasehold: bench"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestNotACPUProfile(t *testing.T) {
	var heap bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&heap, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := parseProfile(heap.Bytes()); err == nil || !strings.Contains(err.Error(), "not a CPU profile") {
		t.Fatalf("a heap profile: %v, want refused as not a CPU profile", err)
	}
	if _, err := parseProfile([]byte{0x1f, 0x8b, 1, 2, 3}); err == nil {
		t.Fatal("a broken gzip stream was read")
	}
	if _, err := parseProfile([]byte{0x0a, 0xff}); err == nil {
		t.Fatal("a truncated message was read")
	}
}

// TestProfileBound refuses a profile over the bound, as read from its
// file and once unzipped.
func TestProfileBound(t *testing.T) {
	var cpu bytes.Buffer
	if err := pprof.StartCPUProfile(&cpu); err != nil {
		t.Fatal(err)
	}
	pprof.StopCPUProfile()
	defer func(n int) { maxProfileBytes = n }(maxProfileBytes)
	maxProfileBytes = cpu.Len() - 1
	file := filepath.Join(t.TempDir(), "cpu.prof")
	if err := os.WriteFile(file, cpu.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := splitFile(io.Discard, file, 16); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a file over the bound: %v, want it refused", err)
	}
	z, err := gzip.NewReader(bytes.NewReader(cpu.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	maxProfileBytes = len(unzipped) - 1
	if _, err := parseProfile(cpu.Bytes()); err == nil || !strings.Contains(err.Error(), "unzipped") {
		t.Fatalf("unzipped over the bound: %v, want it refused", err)
	}
}
