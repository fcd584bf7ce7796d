package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/client"
)

func TestHistQuantilesWithinOnePercent(t *testing.T) {
	h := newHist()
	var all []time.Duration
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		// Log-uniform from 10µs to 10s: every bucket size is exercised.
		d := time.Duration(math.Exp(math.Log(1e4) + r.Float64()*math.Log(1e6)))
		all = append(all, d)
		h.add(d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999} {
		want := all[int(math.Ceil(q*float64(len(all))))-1]
		got := h.quantile(q)
		if rel := math.Abs(float64(got-want)) / float64(want); rel > 0.01 {
			t.Errorf("q%v = %v, exact %v (%.2f%% off)", q, got, want, 100*rel)
		}
	}
	if h.quantile(1) != all[len(all)-1] || h.max != all[len(all)-1] {
		t.Errorf("max %v, quantile(1) %v, want %v", h.max, h.quantile(1), all[len(all)-1])
	}
}

func TestHistMergeAndEdges(t *testing.T) {
	a, b := newHist(), newHist()
	if a.quantile(0.5) != 0 {
		t.Fatal("empty hist has a quantile")
	}
	a.add(-time.Second) // clamped to 0
	b.add(3 * time.Millisecond)
	b.add(time.Duration(math.MaxInt64))
	a.merge(b)
	if a.n != 3 || a.max != time.Duration(math.MaxInt64) {
		t.Fatalf("merged n=%d max=%v", a.n, a.max)
	}
	if got := a.quantile(0.5); got < 2970*time.Microsecond || got > 3030*time.Microsecond {
		t.Fatalf("median %v, want about 3ms", got)
	}
	for v := uint64(0); v < 1<<20; v += 997 {
		if i := bucketOf(v); i >= histSize || bucketValue(i) > time.Duration(v)*101/100+1 || bucketValue(i) < time.Duration(v)*99/100 {
			t.Fatalf("value %d: bucket %d holds %v", v, i, bucketValue(i))
		}
	}
}

func TestResultLineRoundTrip(t *testing.T) {
	r := &Result{Workload: "job-cycle", Concurrency: 16, Ops: 100, Errs: 2, Window: time.Second, OpsPerSec: 100,
		P50: 3 * time.Millisecond, P99: 9 * time.Millisecond, Max: 12 * time.Millisecond,
		CPUServers: math.NaN(), CPUGenerator: 12.5, RaftWritesPerOp: 0.8}
	r.add("queue", "a b") // spaces never reach the line
	r.add("gap", 1500*time.Microsecond)
	r.add("flag", true)
	line := r.Line()
	want := "RESULT system=leasehold op=job-cycle c=16 ops=100 ops_s=100.0 p50_ms=3.000 p99_ms=9.000 max_ms=12.000 errs=2 " +
		"cpu_srv_pct=NA cpu_gen_pct=12.5 raft_writes_per_op=0.800 queue=a_b gap=1.500 flag=1"
	if line != want {
		t.Fatalf("line\n%s\nwant\n%s", line, want)
	}
	kv, err := ParseLine(line)
	if err != nil || kv["op"] != "job-cycle" || kv["queue"] != "a_b" || len(kv) != 15 {
		t.Fatalf("ParseLine: %v %v", kv, err)
	}
	for _, bad := range []string{"", "RESULTS a=1", "RESULT a", "RESULT a=1 a=2", "RESULT =1"} {
		if _, err := ParseLine(bad); err == nil {
			t.Errorf("ParseLine(%q) accepted", bad)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP leasehold_raft_log_writes_total x
# TYPE leasehold_raft_log_writes_total counter
leasehold_raft_log_writes_total 42
leasehold_raft_log_entries_total 99
leasehold_leader 1
leasehold_jobs{state="queued"} 3
go_memstats_mallocs_total 1.2345678e+07
leasehold_raft_replication_heartbeat_count{peer_id="node-2"} 5
leasehold_raft_replication_heartbeat_count{peer_id="node-3"} 7
leasehold_raft_replication_heartbeat_node_2_count 5
leasehold_raft_replication_heartbeat_sum{peer_id="node-2"} 1.5
leasehold_raft_replication_append_entries_rpc_count{peer_id="node-2"} 20
leasehold_raft_replication_append_entries_rpc_count{peer_id="node-3"} 22
leasehold_raft_replication_append_entries_rpc_node_2_count 20
leasehold_raft_replication_append_entries_rpc_node_2_sum 99
leasehold_raft_replication_append_entries_rpc_sum{peer_id="node-2"} 10.5
leasehold_raft_replication_append_entries_rpc_sum{peer_id="node-3"} 11.5
leasehold_raft_commit_time_sum 30.25
leasehold_raft_commit_time_count 50
leasehold_raft_commit_time_bucket{le="1"} 49
leasehold_log_store_write_seconds_sum 0.0125
leasehold_log_store_write_seconds_count 40
leasehold_log_store_write_seconds_count_x 7
process_start_time_seconds 1.79655881792e+09
`))
	if err != nil || m.logWrites != 42 || m.logEntries != 99 || !m.leader || m.mallocs != 12345678 || !m.mallocsOK {
		t.Fatalf("%+v %v", m, err)
	}
	wantPeers := map[string]peerSeries{`peer_id="node-2"`: {5, timing{10.5, 20}}, `peer_id="node-3"`: {7, timing{11.5, 22}}}
	if len(m.peers) != len(wantPeers) {
		t.Fatalf("%d followers' series, want node-2's and node-3's labelled series only", len(m.peers))
	}
	for labels, want := range wantPeers {
		if got := m.peers[labels]; got == nil || *got != want {
			t.Fatalf("series {%s}: %v, want %v", labels, got, want)
		}
	}
	if want := [2]timing{{30.25, 50}, {12.5, 40}}; m.timed != want {
		t.Fatalf("commit and log write timings %v, want %v", m.timed, want)
	}
	if m.started != 1796558817.92 {
		t.Fatalf("process start %v", m.started)
	}
	if m, err := parseMetrics(strings.NewReader("leasehold_raft_log_writes_total 1\n")); err != nil || m.mallocsOK {
		t.Fatalf("metrics without go_memstats_mallocs_total: %+v %v, want mallocs unknown", m, err)
	}
	if _, err := parseMetrics(strings.NewReader("leasehold_leader 0\n")); err == nil {
		t.Fatal("metrics without the writes counter accepted")
	}
}

func TestProcCPUOfSelf(t *testing.T) {
	cpu, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if cpu < 0 || cpu > time.Hour {
		t.Fatalf("cpu %v", cpu)
	}
}

// A process's read system calls grow by at least one for each read it
// makes of a file.
func TestProcSyscallsOfSelf(t *testing.T) {
	r0, w0, err := procSyscalls(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := os.ReadFile("/proc/self/stat"); err != nil {
			t.Fatal(err)
		}
	}
	r1, w1, err := procSyscalls(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if r1 < r0+5 || w1 < w0 {
		t.Fatalf("reads %d → %d and writes %d → %d after five file reads", r0, r1, w0, w1)
	}
}

// The leader's system calls per op come from its /proc/PID/io at the two
// ends of the window; unknown when either end could not read it.
func TestSyscallsPerOp(t *testing.T) {
	at := time.Unix(1000, 0)
	node := func(reads, writes uint64, leader bool) nodeSample {
		return nodeSample{ok: true, metrics: nodeMetrics{logWrites: 1, leader: leader}, syscalls: [2]uint64{reads, writes}, syscallsOK: true}
	}
	a := mark{at: at, nodes: []nodeSample{node(10, 10, false), node(1000, 500, true)}}
	b := mark{at: at.Add(time.Second), nodes: []nodeSample{node(20, 20, false), node(1450, 800, true)}}
	e := &env{cfg: &Config{Workload: "job-cycle", Concurrency: 1, Endpoints: []string{"a", "b"}}}
	p := &phase{start: at, end: at.Add(time.Second), ops: 100, hist: newHist()}
	r := e.result(p, between(a, b), 1)
	if rd, wr := getKey(r, "reads_per_op_leader"), getKey(r, "writes_per_op_leader"); rd != "4.50" || wr != "3.00" {
		t.Fatalf("reads_per_op_leader %s, writes_per_op_leader %s; want 4.50 and 3.00", rd, wr)
	}
	if hb, ap := getKey(r, "raft_heartbeats_per_op_leader"), getKey(r, "raft_appends_per_op_leader"); hb != "0.000" || ap != "0.000" {
		t.Fatalf("no RPCs counted: raft_heartbeats_per_op_leader %s, raft_appends_per_op_leader %s; want 0.000", hb, ap)
	}
	peers := func(beats1, appends1 uint64, sum1 float64, beats2, appends2 uint64, sum2 float64) map[string]*peerSeries {
		return map[string]*peerSeries{"f1": {beats1, timing{sum1, appends1}}, "f2": {beats2, timing{sum2, appends2}}}
	}
	a.nodes[1].metrics.peers = peers(4, 10, 30, 6, 10, 40)
	b.nodes[1].metrics.peers = peers(24, 60, 70, 26, 70, 90)
	r = e.result(p, between(a, b), 1)
	if hb, ap, ms := getKey(r, "raft_heartbeats_per_op_leader"), getKey(r, "raft_appends_per_op_leader"), getKey(r, "append_rpc_ms_leader"); hb != "0.400" || ap != "1.100" || ms != "0.818" {
		t.Fatalf("raft_heartbeats_per_op_leader %s, raft_appends_per_op_leader %s, append_rpc_ms_leader %s; want 0.400, 1.100 and 0.818", hb, ap, ms)
	}
	for _, k := range []string{"commit_ms_leader", "log_write_ms_leader"} {
		if v := getKey(r, k); v != "NA" {
			t.Fatalf("no timings: %s %s, want NA", k, v)
		}
	}
	b.nodes[1].metrics.peers["f3"] = &peerSeries{10, timing{20, 10}} // a follower first heard from in the window
	r = e.result(p, between(a, b), 1)
	if hb, ap, ms := getKey(r, "raft_heartbeats_per_op_leader"), getKey(r, "raft_appends_per_op_leader"), getKey(r, "append_rpc_ms_leader"); hb != "0.500" || ap != "1.200" || ms != "0.917" {
		t.Fatalf("a new follower: raft_heartbeats_per_op_leader %s, raft_appends_per_op_leader %s, append_rpc_ms_leader %s; want 0.500, 1.200 and 0.917", hb, ap, ms)
	}
	unknown := func(why string) {
		t.Helper()
		r := e.result(p, between(a, b), 1)
		for _, k := range []string{"raft_heartbeats_per_op_leader", "raft_appends_per_op_leader", "append_rpc_ms_leader"} {
			if v := getKey(r, k); v != "NA" {
				t.Fatalf("%s: %s %s, want NA", why, k, v)
			}
		}
	}
	delete(b.nodes[1].metrics.peers, "f2")
	unknown("a follower's series forgotten in the window")
	b.nodes[1].metrics.peers["f2"] = &peerSeries{2, timing{90, 70}}
	unknown("fewer heartbeats at the end")
	b.nodes[1].metrics.peers["f2"] = &peerSeries{26, timing{90, 70}}
	a.nodes[1].metrics.started, b.nodes[1].metrics.started = 100, 200
	unknown("a restart")
	a.nodes[1].metrics.started = 200
	a.nodes[1].metrics.timed = [2]timing{{100, 10}, {7, 5}}
	b.nodes[1].metrics.timed = [2]timing{{160, 110}, {12, 15}}
	b.nodes[0].metrics.timed = [2]timing{{900, 10}, {900, 10}} // a follower's: not read
	r = e.result(p, between(a, b), 1)
	if c, ap, lw := getKey(r, "commit_ms_leader"), getKey(r, "append_rpc_ms_leader"), getKey(r, "log_write_ms_leader"); c != "0.600" || ap != "0.917" || lw != "0.500" {
		t.Fatalf("commit_ms_leader %s, append_rpc_ms_leader %s, log_write_ms_leader %s; want 0.600, 0.917 and 0.500", c, ap, lw)
	}
	b.nodes[1].metrics.timed[timedCommit] = timing{90, 120} // a count or sum that fell
	b.nodes[1].metrics.timed[timedLogWrite] = timing{12, 5}
	r = e.result(p, between(a, b), 1)
	if c, lw := getKey(r, "commit_ms_leader"), getKey(r, "log_write_ms_leader"); c != "NA" || lw != "NA" {
		t.Fatalf("a sum or a count fell: commit_ms_leader %s, log_write_ms_leader %s; want NA", c, lw)
	}
	b.nodes[1].syscallsOK = false
	r = e.result(p, between(a, b), 1)
	if rd, wr := getKey(r, "reads_per_op_leader"), getKey(r, "writes_per_op_leader"); rd != "NA" || wr != "NA" {
		t.Fatalf("the leader's calls unknown: reads_per_op_leader %s, writes_per_op_leader %s; want NA", rd, wr)
	}
}

func getKey(r *Result, k string) string {
	v, _ := r.Get(k)
	return v
}

func TestConfigValidation(t *testing.T) {
	for name, c := range map[string]Config{
		"workload":       {Workload: "nope", Endpoints: []string{"a:1"}},
		"target":         {Workload: "acquire", Target: "follower", Endpoints: []string{"a:1"}},
		"leases":         {Workload: "acquire", Leases: 300, Endpoints: []string{"a:1"}},
		"rounds":         {Workload: "fencing", Rounds: 1, Endpoints: []string{"a:1"}},
		"failover":       {Workload: "failover", Endpoints: []string{"a:1"}},
		"endpoints":      {Workload: "acquire"},
		"duration":       {Workload: "acquire", Duration: time.Millisecond, Endpoints: []string{"a:1"}},
		"kill-after":     {Workload: "failover", Duration: time.Second, KillAfter: 2 * time.Second, Endpoints: []string{"a:1"}},
		"payload":        {Workload: "acquire", PayloadSize: 1 << 20, Endpoints: []string{"a:1"}},
		"concurrency":    {Workload: "acquire", Concurrency: -1, Endpoints: []string{"a:1"}},
		"cpu-profile":    {Workload: "expiry", CPUProfile: "cpu.prof", Endpoints: []string{"a:1"}},
		"leader-profile": {Workload: "failover", LeaderProfile: "leader.prof", Endpoints: []string{"a:1"}},
	} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
	c, err := Config{Workload: "mixed", Endpoints: []string{"a:1"}}.withDefaults()
	if err != nil || c.Concurrency != 16 || c.Held != 10000 || c.KillAfter != 5*time.Second {
		t.Fatalf("defaults: %+v %v", c, err)
	}
}

func TestNoGrantIsAnErrorWhileThePoolHasJobs(t *testing.T) {
	e := &env{cfg: &Config{Concurrency: 4}}
	p := e.newPool("pool")
	p.submitted.Store(100)
	// 100 submitted, 10 taken: 90 left, far more than 4 callers could be
	// taking at once. Nothing granted is the cluster's failure.
	if err := p.noGrant(10); !errors.Is(err, errNoGrant) || errKind(err) != "NO_GRANT" {
		t.Fatalf("90 left: %v (kind %s), want NO_GRANT", err, errKind(err))
	}
	// 8 left: the other callers may hold them; the pool ran out.
	if err := p.noGrant(92); !errors.Is(err, errDrained) {
		t.Fatalf("8 left: %v, want drained", err)
	}
}

func TestWriteGaps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	k := kill{at: at(500), reaped: at(501)}
	start, end, done := at(0), at(1000), at(1020)
	// Writes every 10ms until the kill, then from 800ms; one before the
	// window (warmup) does not count.
	before := []time.Time{at(-300)}
	for ms := 10; ms <= 490; ms += 10 {
		before = append(before, at(ms))
	}
	writes := slices.Clone(before)
	for ms := 800; ms <= 1010; ms += 10 {
		writes = append(writes, at(ms))
	}
	rec, gap := writeGaps(writes, k, start, end, done)
	if rec != 300*time.Millisecond || gap != 310*time.Millisecond {
		t.Fatalf("recovery %v gap %v, want 300ms and 310ms", rec, gap)
	}
	// Writes resumed only after the window, by an op started inside it:
	// the silence is measured whole, past the window's end.
	late := append(slices.Clone(before), at(1500))
	if rec, gap = writeGaps(late, k, start, end, at(1500)); rec != time.Second || gap != 1010*time.Millisecond {
		t.Fatalf("late resumption: recovery %v gap %v, want 1s and 1.01s", rec, gap)
	}
	// Writes never resumed: no recovery, and the gap runs to the last op's end.
	if rec, gap = writeGaps(before, k, start, end, done); rec != -1 || gap != 530*time.Millisecond {
		t.Fatalf("no resumption: recovery %v gap %v, want -1 and 530ms", rec, gap)
	}
	// A silence that began after the window (1100 to 1900) is not its.
	if _, gap = writeGaps([]time.Time{at(10), at(995), at(1100), at(1900)}, k, start, end, at(1900)); gap != 985*time.Millisecond {
		t.Fatalf("gap %v, want 985ms (10 to 995)", gap)
	}
}

func TestErrKind(t *testing.T) {
	for want, err := range map[string]error{
		"STALE_TOKEN": fmt.Errorf("report: %w", &client.Error{Reason: "STALE_TOKEN", Code: connect.CodeFailedPrecondition}),
		"UNKNOWN":     &client.Error{Code: connect.CodeUnknown},
		"LOST":        fmt.Errorf("heartbeat: %w", errLost),
		"DEADLINE":    context.DeadlineExceeded,
		"OTHER":       errors.New("?"),
	} {
		if got := errKind(err); got != want {
			t.Errorf("errKind(%v) = %s, want %s", err, got, want)
		}
	}
}

// The servers' allocations per op come from each node's
// go_memstats_mallocs_total at the two ends of the window: summed over
// the nodes, and the leader's alone; unknown when a node's count is
// unknown or went back (a restarted process counts afresh).
func TestAllocsPerOp(t *testing.T) {
	at := time.Unix(1000, 0)
	node := func(mallocs uint64, leader bool) nodeSample {
		return nodeSample{ok: true, metrics: nodeMetrics{logWrites: 1, leader: leader, mallocs: mallocs, mallocsOK: true}}
	}
	a := mark{at: at, nodes: []nodeSample{node(1000, false), node(5000, true), node(100, false)}}
	b := mark{at: at.Add(time.Second), nodes: []nodeSample{node(1300, false), node(9000, true), node(400, false)}}
	e := &env{cfg: &Config{Workload: "job-cycle", Concurrency: 1, Endpoints: []string{"a", "b", "c"}}}
	p := &phase{start: at, end: at.Add(time.Second), ops: 100, hist: newHist()}
	r := e.result(p, between(a, b), 1)
	if all, lead := getKey(r, "allocs_per_op"), getKey(r, "allocs_per_op_leader"); all != "46.0" || lead != "40.0" {
		t.Fatalf("allocs_per_op %s, leader %s; want 46.0 and 40.0", all, lead)
	}
	b.nodes[2] = node(50, false) // node 3 restarted
	r = e.result(p, between(a, b), 1)
	if all, lead := getKey(r, "allocs_per_op"), getKey(r, "allocs_per_op_leader"); all != "NA" || lead != "40.0" {
		t.Fatalf("a node's count went back: allocs_per_op %s, leader %s; want NA and 40.0", all, lead)
	}
	b.nodes[1].metrics.mallocsOK = false // an old server without the Go collector's count
	r = e.result(p, between(a, b), 1)
	if lead := getKey(r, "allocs_per_op_leader"); lead != "NA" {
		t.Fatalf("the leader's count unknown: allocs_per_op_leader %s, want NA", lead)
	}
}
