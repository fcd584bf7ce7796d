package bench_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/bench"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/testbin"
	"github.com/leasehold/leasehold/internal/testwait"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Each test runs one workload for about a second against a 3-node cluster
// of its own (separate server processes), then checks the RESULT line and
// that its counters agree with what the cluster itself says. Timings are
// fast (renew 0.5s, grace 2s, toleration 3s) so expiry takes seconds.

const testBound = 60 * time.Second // one test's cluster and run, end to end

func startCluster(t *testing.T) *bench.LocalCluster {
	t.Helper()
	return startClusterWith(t, bench.ClusterOptions{})
}

// startClusterWith is startCluster with more options: the binary, the
// directory, the timings and the ready bound are the tests'.
func startClusterWith(t *testing.T, o bench.ClusterOptions) *bench.LocalCluster {
	t.Helper()
	o.Binary, o.Dir, o.Nodes = testbin.Leasehold(t), t.TempDir(), 3
	o.RenewSeconds, o.GraceSeconds, o.TolerationSeconds = 0.5, 2, 3
	o.ReadyTimeout = testwait.Bound(30 * time.Second)
	lc, err := bench.StartCluster(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	testbin.KillAtEnd(t, lc)
	return lc
}

// run runs cfg against lc and returns the RESULT line's keys, having
// checked the fixed keys are there and every number parses.
func run(t *testing.T, lc *bench.LocalCluster, cfg bench.Config) map[string]string {
	t.Helper()
	ctx := testwait.Context(t, testBound)
	cfg.Cluster = lc
	if cfg.Duration == 0 {
		cfg.Duration = time.Second
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	cfg.Warmup = 200 * time.Millisecond
	cfg.Log = testLog{t}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	line := res.Line()
	t.Log(line)
	if strings.Count(line, "\n") != 0 {
		t.Fatalf("RESULT is more than one line: %q", line)
	}
	kv, err := bench.ParseLine(line)
	if err != nil {
		t.Fatal(err)
	}
	fixed := []string{"system", "op", "c", "ops", "ops_s", "p50_ms", "p99_ms", "max_ms", "errs",
		"cpu_srv_pct", "cpu_gen_pct", "raft_writes_per_op"}
	for i, k := range fixed {
		if _, ok := kv[k]; !ok {
			t.Fatalf("RESULT has no %s", k)
		}
		if got := strings.Fields(line)[i+1]; !strings.HasPrefix(got, k+"=") {
			t.Fatalf("RESULT key %d is %s, want %s", i+1, got, k)
		}
	}
	if kv["system"] != "leasehold" || kv["op"] != cfg.Workload {
		t.Fatalf("system=%s op=%s", kv["system"], kv["op"])
	}
	for _, k := range append(fixed[2:], "fsyncs_s_node1", "fsyncs_s_node2", "fsyncs_s_node3", "window_s", "wire_reqs") {
		v := kv[k]
		if k == "raft_writes_per_op" && v == "NA" && kv["ops"] == "0" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || f < 0 {
			t.Fatalf("%s=%q is not a number >= 0", k, v)
		}
	}
	// The servers' CPU is known with a started cluster; a run does work.
	// CPU time is counted in clock ticks (10 ms), so a window shorter than
	// a second (an expiry drain) may honestly read zero.
	if f(t, kv, "window_s") >= 1 && (f(t, kv, "cpu_srv_pct") <= 0 || f(t, kv, "cpu_gen_pct") <= 0) {
		t.Fatalf("cpu_srv_pct=%s cpu_gen_pct=%s", kv["cpu_srv_pct"], kv["cpu_gen_pct"])
	}
	return kv
}

func f(t *testing.T, kv map[string]string, key string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(kv[key], 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, kv[key], err)
	}
	return v
}

func n(t *testing.T, kv map[string]string, key string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(kv[key], 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, kv[key], err)
	}
	return v
}

func want(t *testing.T, kv map[string]string, key string, v int64) {
	t.Helper()
	if got := n(t, kv, key); got != v {
		t.Errorf("%s=%d, want %d", key, got, v)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func newClient(t *testing.T, lc *bench.LocalCluster) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Endpoints: lc.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// leaderStatus is the leader's Status: Status answers from the node the
// client is pinned to, and a follower's state may lag (it learns a commit
// with the next write), so the client is first moved to the leader by a
// call's leader hint.
func leaderStatus(t *testing.T, cl *client.Client) *pb.StatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.Members(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != "Leader" {
		t.Fatalf("status from %s, a %s", st.GetId(), st.GetState())
	}
	return st
}

// countJobs counts the jobs req selects, every page.
func countJobs(t *testing.T, cl *client.Client, req *pb.ListJobsRequest, pred func(*pb.Job) bool) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req.PageSize = 1000
	var count int64
	for {
		resp, err := cl.Jobs(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range resp.GetJobs() {
			if pred == nil || pred(j) {
				count++
			}
		}
		if resp.GetNextPageToken() == 0 {
			return count
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func TestJobCycle(t *testing.T) {
	lc := startCluster(t)
	refusedBeforeLoad(t, lc, bench.Config{Workload: "job-cycle", CPUProfile: filepath.Join(t.TempDir(), "missing", "cpu.prof")}, "--cpu-profile")
	profile := filepath.Join(t.TempDir(), "cpu.prof")
	kv := run(t, lc, bench.Config{Workload: "job-cycle", CPUProfile: profile})
	want(t, kv, "errs", 0)
	checkCPUProfile(t, profile)
	if n(t, kv, "ops") == 0 || f(t, kv, "ops_s") <= 0 {
		t.Fatalf("no cycles: %v", kv)
	}
	// Every cycle the bench counted is a job the cluster says was reported.
	cycles := n(t, kv, "cycles_total")
	reported := countJobs(t, newClient(t, lc), &pb.ListJobsRequest{Submitter: kv["run"], State: pb.JobState_JOB_STATE_REPORTED}, nil)
	if reported != cycles || cycles < n(t, kv, "ops") {
		t.Fatalf("%d jobs reported, %d cycles counted (%d in the window)", reported, cycles, n(t, kv, "ops"))
	}
	// Two commands per cycle, and Raft cannot write less than once per
	// batch: writes per op is in (0, 2].
	if w := f(t, kv, "raft_writes_per_op"); w <= 0 || w > 2.05 {
		t.Fatalf("raft_writes_per_op=%v for 2 commands per cycle", w)
	}
	// The leader's series are read by their real names: each cycle's
	// commits, appends and log writes took some time.
	for _, k := range []string{"commit_ms_leader", "append_rpc_ms_leader", "log_write_ms_leader"} {
		if v := f(t, kv, k); v <= 0 {
			t.Fatalf("%s=%v after %d cycles", k, v, cycles)
		}
	}
}

func TestStatus(t *testing.T) {
	lc := startCluster(t)
	// Servers that do not serve profiles fail a run asked for the
	// leader's, after its window, naming the flag and what it needs.
	ctx := testwait.Context(t, testBound)
	_, err := bench.Run(ctx, bench.Config{Workload: "status", Cluster: lc, Duration: time.Second,
		LeaderProfile: filepath.Join(t.TempDir(), "leader.prof"), Log: testLog{t}})
	if err == nil || !strings.Contains(err.Error(), "--leader-profile") || !strings.Contains(err.Error(), "--pprof") {
		t.Fatalf("the leader's profile from servers without --pprof: %v, want the run failed naming --leader-profile and --pprof", err)
	}
	kv := run(t, lc, bench.Config{Workload: "status"})
	want(t, kv, "errs", 0)
	if n(t, kv, "ops") == 0 {
		t.Fatal("no status calls")
	}
	// A status call proposes nothing, and is one HTTP request.
	if c := f(t, kv, "cmds_per_op"); c != 0 {
		t.Fatalf("cmds_per_op=%v", c)
	}
	if w := f(t, kv, "raft_writes_per_op"); w > 0.01 {
		t.Fatalf("raft_writes_per_op=%v: status calls write to the log", w)
	}
	if reqs, ops := n(t, kv, "wire_reqs"), n(t, kv, "ops"); reqs < ops {
		t.Fatalf("wire_reqs=%d for %d calls", reqs, ops)
	}
}

func TestLeaderProfile(t *testing.T) {
	lc := startClusterWith(t, bench.ClusterOptions{Pprof: true})
	refusedBeforeLoad(t, lc, bench.Config{Workload: "status", LeaderProfile: filepath.Join(t.TempDir(), "missing", "leader.prof")}, "--leader-profile")
	profile := filepath.Join(t.TempDir(), "leader.prof")
	kv := run(t, lc, bench.Config{Workload: "status", LeaderProfile: profile})
	want(t, kv, "errs", 0)
	checkCPUProfile(t, profile)
}

// refusedBeforeLoad checks that cfg, naming a profile's file that cannot be
// written, fails before any load, with an error naming flag: an hour's
// warmup would otherwise run out the test's bound.
func refusedBeforeLoad(t *testing.T, lc *bench.LocalCluster, cfg bench.Config, flag string) {
	t.Helper()
	cfg.Cluster, cfg.Duration, cfg.Warmup, cfg.Log = lc, time.Second, time.Hour, testLog{t}
	_, err := bench.Run(testwait.Context(t, testBound), cfg)
	if err == nil || !strings.Contains(err.Error(), flag) {
		t.Fatalf("a profile in a missing directory: %v, want the run refused naming %s", err, flag)
	}
}

// checkCPUProfile checks that file holds a Go CPU profile: gzipped
// protocol buffers whose string table names the sample type, "cpu" in
// "nanoseconds", written and closed.
func checkCPUProfile(t *testing.T, file string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("--cpu-profile: %v", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("--cpu-profile %s: %v", file, err)
	}
	raw, err := io.ReadAll(z)
	if err != nil {
		t.Fatalf("--cpu-profile %s, not whole: %v", file, err)
	}
	if !bytes.Contains(raw, []byte("cpu")) || !bytes.Contains(raw, []byte("nanoseconds")) {
		t.Fatalf("--cpu-profile %s: no CPU sample type in its %d bytes", file, len(raw))
	}
}

func TestJobCycleSubmit(t *testing.T) {
	lc := startCluster(t)
	kv := run(t, lc, bench.Config{Workload: "job-cycle", Submit: true, Target: bench.TargetAny})
	want(t, kv, "errs", 0)
	if kv["submit"] != "1" || kv["cmds_per_op"] != "3.0" || kv["target"] != "any" {
		t.Fatalf("submit=%s cmds_per_op=%s target=%s", kv["submit"], kv["cmds_per_op"], kv["target"])
	}
	cl := newClient(t, lc)
	cycles := n(t, kv, "cycles_total")
	if got := countJobs(t, cl, &pb.ListJobsRequest{Submitter: kv["run"], State: pb.JobState_JOB_STATE_REPORTED}, nil); got != cycles {
		t.Fatalf("%d jobs reported, %d cycles", got, cycles)
	}
	// Target any really spread the calls: every node served some.
	if n(t, kv, "wire_reqs") < 3*n(t, kv, "ops") {
		t.Fatalf("wire_reqs=%s for %s cycles of 4 calls", kv["wire_reqs"], kv["ops"])
	}
}

func TestAcquire(t *testing.T) {
	lc := startCluster(t)
	kv := run(t, lc, bench.Config{Workload: "acquire"})
	want(t, kv, "errs", 0)
	// Every acquire the bench counted granted a lease the cluster recorded
	// on its job.
	acquired := n(t, kv, "acquired_total")
	leased := countJobs(t, newClient(t, lc), &pb.ListJobsRequest{Queue: kv["queue"]}, func(j *pb.Job) bool { return len(j.GetLeases()) > 0 })
	if leased != acquired || acquired < n(t, kv, "ops") || acquired == 0 {
		t.Fatalf("%d jobs leased, %d acquires counted (%d in the window)", leased, acquired, n(t, kv, "ops"))
	}
	if w := f(t, kv, "raft_writes_per_op"); w <= 0 || w > 1.05 {
		t.Fatalf("raft_writes_per_op=%v for one command per acquire", w)
	}
}

// Heartbeats over a stream per caller (the default) and with one call each
// (Unary).
func TestHeartbeat(t *testing.T) {
	for _, transport := range []string{"stream", "shared", "unary"} {
		unary := transport == "unary"
		t.Run(transport, func(t *testing.T) {
			lc := startCluster(t)
			kv := run(t, lc, bench.Config{Workload: "heartbeat", Leases: 5, Unary: unary, Shared: transport == "shared"})
			if kv["transport"] != transport {
				t.Fatalf("transport=%s, want %s", kv["transport"], transport)
			}
			want(t, kv, "errs", 0)
			want(t, kv, "lost", 0)
			if n(t, kv, "ops") == 0 {
				t.Fatal("no heartbeats")
			}
			// Heartbeats never touch the Raft log: a handful of writes
			// (leader bookkeeping) per thousands of heartbeats at most.
			if w := f(t, kv, "raft_writes_per_op"); w > 0.01 {
				t.Fatalf("raft_writes_per_op=%v: heartbeats write to the log", w)
			}
			if got, want := f(t, kv, "leases_renewed_s"), 5*f(t, kv, "ops_s"); math.Abs(got-want) > 1 {
				t.Fatalf("leases_renewed_s=%v, want %v", got, want)
			}
			// A stream is one HTTP request however many beats it carries:
			// one per worker, or one for all (shared, one client).
			streams := map[string]int64{"stream": 4, "shared": 1}[transport]
			if reqs := n(t, kv, "wire_reqs"); !unary && reqs > streams || unary && reqs < n(t, kv, "ops") {
				t.Fatalf("wire_reqs=%d for %s ops", reqs, kv["ops"])
			}
			if st := leaderStatus(t, newClient(t, lc)); st.GetLiveLeases() != 4*5 {
				t.Fatalf("%d live leases, want the 20 heartbeated", st.GetLiveLeases())
			}
		})
	}
}

func TestMixed(t *testing.T) {
	lc := startCluster(t)
	kv := run(t, lc, bench.Config{Workload: "mixed", Held: 300})
	if kv["transport"] != "stream" {
		t.Fatalf("transport=%s: held leases heartbeat over streams by default", kv["transport"])
	}
	want(t, kv, "errs", 0)
	want(t, kv, "leases_lost", 0)
	want(t, kv, "held_expired", 0)
	want(t, kv, "held_leases", 300)
	// 30 workers heartbeating every 0.5s, counted when due inside the 1s
	// window: the open loop keeps its schedule, so never more than 2 each
	// (one may be missed at the window's very end when the timer fires late).
	if s := n(t, kv, "hb_sent"); s < 1 || s > 60 {
		t.Fatalf("hb_sent=%d, want 1..60", s)
	}
	if g := f(t, kv, "hb_gap_max_ms"); g <= 0 {
		t.Fatalf("hb_gap_max_ms=%v", g)
	}
	cl := newClient(t, lc)
	cycles := n(t, kv, "cycles_total")
	if got := countJobs(t, cl, &pb.ListJobsRequest{Queue: kv["queue"], State: pb.JobState_JOB_STATE_REPORTED}, nil); got != cycles {
		t.Fatalf("%d jobs reported, %d cycles", got, cycles)
	}
}

func TestExpiry(t *testing.T) {
	lc := startCluster(t)
	kv := run(t, lc, bench.Config{Workload: "expiry", Abandon: 500})
	want(t, kv, "abandoned", 500)
	want(t, kv, "expired", 500)
	want(t, kv, "missing", 0)
	want(t, kv, "early", 0)
	want(t, kv, "ops", 500)
	want(t, kv, "jobs_missing", 0)
	want(t, kv, "jobs_requeued", 500)
	// Never early (early=0 above), so lateness is never negative.
	if l := f(t, kv, "late_p50_ms"); l < 0 {
		t.Fatalf("late_p50_ms=%v", l)
	}
	if f(t, kv, "p50_ms") > f(t, kv, "p99_ms") || f(t, kv, "p99_ms") > f(t, kv, "max_ms") {
		t.Fatalf("quantiles out of order: %v %v %v", kv["p50_ms"], kv["p99_ms"], kv["max_ms"])
	}
	// The cluster agrees: no live lease left, every job queued again after
	// losing its worker once.
	cl := newClient(t, lc)
	if st := leaderStatus(t, cl); st.GetLiveLeases() != 0 {
		t.Fatalf("%d live leases after every lease expired", st.GetLiveLeases())
	}
	requeued := countJobs(t, cl, &pb.ListJobsRequest{Submitter: kv["run"], State: pb.JobState_JOB_STATE_QUEUED},
		func(j *pb.Job) bool { return j.GetLosses() == 1 })
	if requeued != 500 {
		t.Fatalf("%d jobs queued again after one loss, want 500", requeued)
	}
}

func TestFailover(t *testing.T) {
	lc := startCluster(t)
	kv := run(t, lc, bench.Config{Workload: "failover", Held: 200, Duration: 3 * time.Second, Concurrency: 8})
	want(t, kv, "expired_while_heartbeating", 0)
	want(t, kv, "held_expired", 0)
	want(t, kv, "leases_lost", 0)
	want(t, kv, "fenced", 0)
	if kv["killed"] == kv["new_leader"] || kv["killed"] == "NA" || kv["new_leader"] == "NA" {
		t.Fatalf("killed=%s new_leader=%s", kv["killed"], kv["new_leader"])
	}
	// Writes resumed after the kill: recovery_ms is a figure, not NA.
	rec, gap := f(t, kv, "recovery_ms"), f(t, kv, "write_gap_max_ms")
	if rec <= 0 || gap <= 0 {
		t.Fatalf("recovery_ms=%v write_gap_max_ms=%v", rec, gap)
	}
	// The surviving nodes hold every cycle the bench counted.
	cl := newClient(t, lc)
	cycles := n(t, kv, "cycles_total")
	if got := countJobs(t, cl, &pb.ListJobsRequest{Queue: kv["queue"], State: pb.JobState_JOB_STATE_REPORTED}, nil); got != cycles {
		t.Fatalf("%d jobs reported, %d cycles", got, cycles)
	}
}

func TestFencing(t *testing.T) {
	lc := startCluster(t)
	kv := run(t, lc, bench.Config{Workload: "fencing", Rounds: 3})
	want(t, kv, "errs", 0)
	want(t, kv, "stale_accepted", 0)
	want(t, kv, "out_of_order", 0)
	want(t, kv, "events_out_of_order", 0)
	want(t, kv, "events_mismatch", 0)
	want(t, kv, "events_truncated", 0)
	cycles := n(t, kv, "cycles_total")
	if cycles == 0 {
		t.Fatal("no fencing cycles")
	}
	// Two stale reports per cycle, each refused and each recorded by the
	// cluster as a lease.stale_report event.
	want(t, kv, "stale_refused", 2*cycles)
	want(t, kv, "stale_events", 2*cycles)
	want(t, kv, "jobs_checked", cycles)
	cl := newClient(t, lc)
	if got := countJobs(t, cl, &pb.ListJobsRequest{Submitter: kv["run"], State: pb.JobState_JOB_STATE_REPORTED},
		func(j *pb.Job) bool { return len(j.GetLeases()) == 3 }); got != cycles {
		t.Fatalf("%d jobs reported after 3 grants, %d cycles", got, cycles)
	}
}

func TestFailoverRefusedWithoutLocalCluster(t *testing.T) {
	_, err := bench.Run(context.Background(), bench.Config{Workload: "failover", Endpoints: []string{"127.0.0.1:1"}})
	if err == nil || !strings.Contains(err.Error(), "--start") {
		t.Fatalf("err = %v", err)
	}
}
