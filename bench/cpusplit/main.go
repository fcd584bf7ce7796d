// Command cpusplit reads Go CPU profiles (a node's /debug/pprof/profile,
// `leasehold bench --leader-profile` or `--cpu-profile`) and splits each
// one's samples two ways, so that a profile with no hot function still
// says where its time goes:
//
//   - by cause: the package of a sample's first frame, counted from the
//     leaf, that is not the Go runtime or a low-level part of the standard
//     library. A system call under a socket write counts for the sockets,
//     an allocation for the code that allocated, a channel send for its
//     sender; a stack of the runtime alone (the collector, the scheduler
//     finding work) counts for the runtime.
//   - by goroutine: what the goroutine that ran the sample is for, read
//     from the bottom of its stack (an API handler, the HTTP/2 server's
//     connection loop, Raft's leader loop, the collector...).
//
// For example, the leader's profile under 64 job cycles at a time:
//
//	leasehold bench job-cycle --start 3 -c 64 -d 20s --leader-profile leader.prof
//	go run ./bench/cpusplit leader.prof
//
// It reads the profile's protocol buffers itself, so it needs nothing
// beyond the module's own dependencies.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	top := flag.Int("top", 16, "rows to print in each split, largest first")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: cpusplit [-top N] PROFILE...")
		os.Exit(2)
	}
	for _, file := range flag.Args() {
		if err := splitFile(os.Stdout, file, *top); err != nil {
			fmt.Fprintln(os.Stderr, "cpusplit:", err)
			os.Exit(1)
		}
	}
}

func splitFile(w io.Writer, file string, top int) error {
	raw, err := readProfile(file)
	if err != nil {
		return err
	}
	p, err := parseProfile(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	byCause := split(p, cause)
	byGoroutine := split(p, goroutine)
	fmt.Fprintf(w, "%s: %s of samples", file, p.total.Round(time.Millisecond))
	if p.duration > 0 {
		fmt.Fprintf(w, " in %s, %.0f %% of a core", p.duration.Round(time.Millisecond), 100*p.total.Seconds()/p.duration.Seconds())
	}
	fmt.Fprintln(w)
	printSplit(w, "by cause (the first frame past the runtime)", byCause, p.total, top)
	printSplit(w, "by goroutine", byGoroutine, p.total, top)
	return nil
}

// share is one row of a split.
type share struct {
	name string
	cpu  time.Duration
}

// split sums the samples' CPU by the name key gives each stack (leaf
// first).
func split(p *profile, key func(stack []string) string) []share {
	sums := map[string]time.Duration{}
	for _, s := range p.samples {
		sums[key(s.stack)] += s.cpu
	}
	out := make([]share, 0, len(sums))
	for name, cpu := range sums {
		out = append(out, share{name, cpu})
	}
	slices.SortFunc(out, func(a, b share) int {
		if c := cmp.Compare(b.cpu, a.cpu); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

func printSplit(w io.Writer, title string, rows []share, total time.Duration, top int) {
	fmt.Fprintf(w, "  %s:\n", title)
	for i, r := range rows {
		if i == top {
			var rest time.Duration
			for _, r := range rows[i:] {
				rest += r.cpu
			}
			fmt.Fprintf(w, "    %5.1f %%  (%d more)\n", pct(rest, total), len(rows)-i)
			break
		}
		fmt.Fprintf(w, "    %5.1f %%  %s\n", pct(r.cpu, total), r.name)
	}
}

func pct(d, total time.Duration) float64 {
	if total == 0 {
		return 0
	}
	return 100 * d.Seconds() / total.Seconds()
}

// lowLevel are the prefixes of the functions a sample's cause is looked
// for past: the runtime, and the parts of the standard library that only
// carry out what their caller asked (a lock, a copy, a system call, a
// buffer's flush).
var lowLevel = []string{
	"runtime.", "internal/", "syscall.", "sync.", "sync/atomic.", "time.", "context.",
	"container/", "bytes.", "strings.", "strconv.", "unicode", "errors.", "sort.", "slices.",
	"maps.", "math", "io.", "bufio.", "os.", "reflect.", "fmt.", "encoding/binary.", "hash/",
	"golang.org/x/sys/", "aeshash", "memeqbody", "memclr", "memmove", "indexbyte", "cmpbody",
	"gcWriteBarrier", "gogo", "type:.", "cmp.",
}

// causes name the packages a cause is reported as, by prefix, the first
// that matches; any other package is reported by its own path.
var causes = []struct{ prefix, name string }{
	{"github.com/leasehold/leasehold/fsm", "leasehold: fsm (the state machine)"},
	{"github.com/leasehold/leasehold/cluster/api", "leasehold: cluster/api (the API's handlers)"},
	{"github.com/leasehold/leasehold/cluster", "leasehold: cluster (the node, checks, expiry)"},
	{"github.com/leasehold/leasehold/transport", "leasehold: transport (wire rules, the peer guard)"},
	{"github.com/leasehold/leasehold/client", "leasehold: client"},
	{"github.com/leasehold/leasehold/bench", "leasehold: bench"},
	{"github.com/leasehold/leasehold/clock", "leasehold: clock (the suspend-aware clock's reads)"},
	{"github.com/leasehold/leasehold/", "leasehold: other"},
	{"github.com/hashicorp/raft-wal", "raft-wal (the log store)"},
	{"github.com/hashicorp/raft-boltdb", "raft-boltdb (the log store)"},
	{"go.etcd.io/bbolt", "raft-boltdb (the log store)"},
	{"github.com/hashicorp/raft", "raft"},
	{"github.com/hashicorp/go-msgpack", "msgpack (Raft's RPCs)"},
	{"connectrpc.com/connect", "Connect"},
	{"google.golang.org/protobuf", "protobuf"},
	{"net/http", "net/http (HTTP/2)"},
	{"vendor/golang.org/x/net/", "net/http (HTTP/2)"},
	{"golang.org/x/net/http2", "net/http (HTTP/2)"},
	{"net/textproto", "net/http (HTTP/2)"},
	{"net/url", "net/http (HTTP/2)"},
	{"net.", "net (sockets)"},
	{"crypto/", "crypto (TLS)"},
	{"github.com/prometheus/", "metrics"},
	{"github.com/hashicorp/go-metrics", "metrics"},
	{"github.com/armon/go-metrics", "metrics"},
	{"compress/", "compression"},
}

// cause names what a stack (leaf first) was spent for.
func cause(stack []string) string {
	for _, fn := range stack {
		if hasAnyPrefix(fn, lowLevel) || !strings.Contains(fn, ".") {
			continue // the runtime, the standard library's helpers, assembly
		}
		for _, c := range causes {
			if strings.HasPrefix(fn, c.prefix) {
				return c.name
			}
		}
		return packageOf(fn)
	}
	return "the runtime alone (the collector, the scheduler)"
}

// goroutines name a goroutine by a function near the bottom of its stack,
// the first rule with a match winning.
var goroutines = []struct {
	name string
	fns  []string
}{
	{"the collector", []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge"}},
	{"raft: the state machine's apply", []string{"raft.(*Raft).runFSM"}},
	{"raft: snapshots", []string{"raft.(*Raft).runSnapshots"}},
	{"raft: the main loop (the log's write and sync, commits)", []string{"raft.(*Raft).run"}},
	{"raft: replication and checks, to each follower", []string{"raft.(*Raft).replicate"}},
	{"raft: answering peers (the transport)", []string{"raft.(*NetworkTransport)"}},
	{"leadership checks: the goroutine that starts them", []string{"cluster.(*leaderCheck).run", "cluster.newLeaderCheck"}},
	{"heartbeat streams: the readers of beats", []string{"api.(*Server).serveHeartbeats.func"}},
	{"API handlers (Connect, leasehold and the cluster below)", []string{"net/http.(*http2serverConn).runHandler"}},
	{"HTTP/2 server: each connection's loop, frame reads and writes", []string{"net/http.(*http2serverConn)", "net/http.(*conn).serve"}},
	{"HTTP/2 client: each connection's reads and the requests' writes", []string{"net/http.(*http2ClientConn)", "net/http.(*http2clientStream)"}},
	{"bench: the callers", []string{"bench.closedLoop", "bench.(*beatMux)", "bench.(*scaleFleet)"}},
	{"client: heartbeat streams", []string{"client.(*HeartbeatStream)"}},
	{"the scheduler (finding work, parking)", []string{"runtime.mcall", "runtime.mstart", "runtime.morestack"}},
}

// goroutine names what the goroutine of a stack (leaf first) was for,
// from the stack's bottom eight frames.
func goroutine(stack []string) string {
	bottom := stack[max(0, len(stack)-8):]
	for _, g := range goroutines {
		for _, fn := range bottom {
			for _, want := range g.fns {
				if strings.Contains(fn, want) {
					return g.name
				}
			}
		}
	}
	return "other"
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// packageOf is the package path of a function's full name: the part
// before the first dot after the last slash, a method's receiver and a
// generic's type arguments (which hold slashes and dots of their own) cut
// off first.
func packageOf(fn string) string {
	if cut := strings.IndexAny(fn, "[("); cut >= 0 {
		fn = fn[:cut]
	}
	slash := strings.LastIndexByte(fn, '/')
	if dot := strings.IndexByte(fn[slash+1:], '.'); dot >= 0 {
		return fn[:slash+1+dot]
	}
	return fn
}
