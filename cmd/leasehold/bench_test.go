package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/bench"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/testbin"
	"github.com/leasehold/leasehold/internal/testwait"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// These tests run `leasehold bench` as a user would: the real binary, built
// once, with --start (its own cluster) or --endpoints (a cluster the test
// started with the bench package's starter, whose state it then checks).

func TestMain(m *testing.M) { testbin.Main(m) }

// Fast timings for --start runs: they stay valid with the bench's Raft
// timeouts (election 500ms, at most grace/4).
var fastTimings = []string{"--renew-seconds", "0.5", "--grace-seconds", "2", "--toleration-seconds", "3"}

type benchRun struct {
	stdout, stderr string
	code           int
}

// startBench starts the binary; the test's cleanup kills it if it is still
// running and waits for it.
func startBench(t *testing.T, args ...string) *testbin.Proc {
	t.Helper()
	return testbin.Start(t, "leasehold", 0, nil, append([]string{testbin.Leasehold(t)}, args...)...)
}

// runBenchCLI runs the binary to its end (at most 90s, scaled).
func runBenchCLI(t *testing.T, args ...string) benchRun {
	t.Helper()
	r := testbin.Run(t, 90*time.Second, nil, append([]string{testbin.Leasehold(t)}, args...)...)
	return benchRun{stdout: r.Stdout, stderr: r.Stderr, code: r.Code}
}

// resultLine checks stdout is exactly one RESULT line and returns its keys.
func resultLine(t *testing.T, r benchRun, workload string) map[string]string {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 1 {
		t.Fatalf("stdout has %d lines, want one RESULT line:\n%s", len(lines), r.stdout)
	}
	kv, err := bench.ParseLine(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	prefix := "RESULT system=leasehold op=" + workload + " c="
	if !strings.HasPrefix(lines[0], prefix) {
		t.Fatalf("line does not start with %q: %s", prefix, lines[0])
	}
	order := []string{"system", "op", "c", "ops", "ops_s", "p50_ms", "p99_ms", "max_ms", "errs", "cpu_srv_pct", "cpu_gen_pct", "raft_writes_per_op"}
	for i, k := range order {
		if got := strings.Fields(lines[0])[i+1]; !strings.HasPrefix(got, k+"=") {
			t.Fatalf("key %d is %s, want %s=", i+1, got, k)
		}
		if i >= 2 && !(k == "cpu_srv_pct" && kv[k] == "NA") {
			if _, err := strconv.ParseFloat(kv[k], 64); err != nil {
				t.Fatalf("%s=%q does not parse", k, kv[k])
			}
		}
	}
	return kv
}

var dataDirRE = regexp.MustCompile(`data in (\S+)\)`)

// serversOf lists processes whose command line names dir.
func serversOf(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(dir)) {
			out = append(out, p)
		}
	}
	return out
}

func TestBenchStartPrintsOneResultLineAndTearsDown(t *testing.T) {
	r := runBenchCLI(t, append([]string{"bench", "job-cycle", "--start", "3", "-c", "4", "-d", "1s", "--warmup", "200ms", "-o", "result"}, fastTimings...)...)
	kv := resultLine(t, r, "job-cycle")
	if kv["c"] != "4" || kv["started"] != "1" || kv["nodes"] != "3" || kv["errs"] != "0" {
		t.Fatalf("c=%s started=%s nodes=%s errs=%s", kv["c"], kv["started"], kv["nodes"], kv["errs"])
	}
	// With --start the servers' CPU is known.
	if v, err := strconv.ParseFloat(kv["cpu_srv_pct"], 64); err != nil || v <= 0 {
		t.Fatalf("cpu_srv_pct=%s", kv["cpu_srv_pct"])
	}
	m := dataDirRE.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("stderr names no data directory:\n%s", r.stderr)
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Fatalf("data directory %s left behind (%v)", m[1], err)
	}
	if left := serversOf(m[1]); len(left) > 0 {
		t.Fatalf("servers left running: %v", left)
	}
}

func TestBenchInterruptStopsTheServers(t *testing.T) {
	p := startBench(t, append([]string{"bench", "heartbeat", "--start", "3", "-c", "2", "-d", "1m", "--warmup", "0s"}, fastTimings...)...)
	testwait.For(t, 30*time.Second, "the measured window to start", func() error {
		if !strings.Contains(p.Stderr(), "measuring") {
			return errors.New("not yet")
		}
		return nil
	})
	m := dataDirRE.FindStringSubmatch(p.Stderr())
	if m == nil {
		t.Fatalf("stderr names no data directory:\n%s", p.Stderr())
	}
	if len(serversOf(m[1])) != 3 {
		t.Fatalf("servers running: %v, want 3", serversOf(m[1]))
	}
	p.Signal(syscall.SIGINT)
	if code := p.Wait(t, 30*time.Second); code != 1 || !strings.Contains(p.Stderr(), "interrupted") {
		t.Fatalf("exit %d, stderr:\n%s", code, p.Stderr())
	}
	if left := serversOf(m[1]); len(left) > 0 {
		t.Fatalf("servers left running after Ctrl-C: %v", left)
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Fatalf("data directory %s left behind (%v)", m[1], err)
	}
}

func TestBenchAgainstEndpoints(t *testing.T) {
	ctx := testwait.Context(t, 60*time.Second)
	lc, err := bench.StartCluster(ctx, bench.ClusterOptions{Binary: testbin.Leasehold(t), Dir: t.TempDir(), RenewSeconds: 0.5,
		GraceSeconds: 2, TolerationSeconds: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Stop)
	eps := strings.Join(lc.Endpoints(), ",")

	kv := resultLine(t, runBenchCLI(t, "bench", "job-cycle", "-e", eps, "-c", "4", "-d", "1s", "--warmup", "200ms", "-o", "result"), "job-cycle")
	// Not the bench's servers: their CPU is not known.
	if kv["cpu_srv_pct"] != "NA" || kv["started"] != "0" {
		t.Fatalf("cpu_srv_pct=%s started=%s", kv["cpu_srv_pct"], kv["started"])
	}
	cl, err := client.New(client.Config{Endpoints: lc.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cycles, _ := strconv.Atoi(kv["cycles_total"])
	if got := countByState(t, ctx, cl, kv["run"])[pb.JobState_JOB_STATE_REPORTED]; got != cycles || cycles == 0 {
		t.Fatalf("%d jobs reported, %d cycles counted", got, cycles)
	}
	// Cleanup on a cluster the bench does not own: the rest of the pool is
	// cancelled, the workers are gone.
	if got := countByState(t, ctx, cl, kv["run"])[pb.JobState_JOB_STATE_QUEUED]; got != 0 {
		t.Fatalf("%d of the run's jobs still queued", got)
	}
	workers, err := cl.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		if strings.HasPrefix(w.GetId(), kv["run"]) {
			t.Fatalf("worker %s still registered", w.GetId())
		}
	}

	// -o json: the same keys, numbers as numbers.
	r := runBenchCLI(t, "bench", "heartbeat", "-e", eps, "-c", "2", "-d", "300ms", "--warmup", "0s", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var js map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
	if _, ok := js["ops_s"].(float64); !ok || js["op"] != "heartbeat" || js["cpu_srv_pct"] != "NA" {
		t.Fatalf("-o json: %v", js)
	}
}

func countByState(t *testing.T, ctx context.Context, cl *client.Client, submitter string) map[pb.JobState]int {
	t.Helper()
	out := map[pb.JobState]int{}
	req := &pb.ListJobsRequest{Submitter: submitter, PageSize: 1000}
	for {
		resp, err := cl.Jobs(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range resp.GetJobs() {
			out[j.GetState()]++
		}
		if resp.GetNextPageToken() == 0 {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func TestBenchRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "failover", "-e", "127.0.0.1:1"}, "--start 3"},
		{[]string{"bench", "job-cycle", "-e", "127.0.0.1:1", "-o", "yaml"}, "table, json or result"},
		{[]string{"bench", "job-cycle", "-e", "127.0.0.1:1", "--target", "followers"}, "leader or any"},
		{[]string{"bench", "job-cycle", "extra"}, "unexpected argument"},
		// -o result is the bench's alone: every other command still refuses it.
		{[]string{"job", "get", "-e", "127.0.0.1:1", "-o", "result", "x"}, "table or json"},
	} {
		r := runBenchCLI(t, tc.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("leasehold %s: exit %d, stderr %q, want it to say %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
}
