package runner

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testbin"
	"github.com/leasehold/leasehold/jepsen-lite/checker"
	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/jepsen-lite/nemesis"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConfigDefaultsAndRefusals(t *testing.T) {
	if _, err := (Config{Out: "x"}).withDefaults(); err == nil || !strings.Contains(err.Error(), "--bin") {
		t.Errorf("no binary: %v", err)
	}
	if _, err := (Config{Bin: "x", Out: "x", Nodes: 4}).withDefaults(); err == nil || !strings.Contains(err.Error(), "3 or 5") {
		t.Errorf("4 nodes: %v", err)
	}
	if _, err := (Config{Bin: "x", Out: "x", Net: "wifi"}).withDefaults(); err == nil {
		t.Error("an unknown net mode was accepted")
	}
	c, err := (Config{Bin: "x", Out: "x"}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Nodes != 3 || c.Timings != CITimings || c.Net != NetAuto || c.Seed == 0 {
		t.Errorf("defaults: %+v", c)
	}
}

func TestProfiles(t *testing.T) {
	b := BuildsIn("/bin-dir")
	runs, err := Profile("ci", b, "/self", "/out", 7)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	expects := map[string]bool{}
	for _, r := range runs {
		if names[r.Name] {
			t.Errorf("run %s twice", r.Name)
		}
		names[r.Name] = true
		if r.Out != filepath.Join("/out", r.Name) || r.Seed != 7 || (r.Self != "/self" && r.Self != b.NoSelfStop) {
			t.Errorf("%s: %+v", r.Name, r)
		}
		if r.Self == b.NoSelfStop {
			// The broken worker beside the real cluster.
			if r.Bin != b.Real || len(r.Expect) == 0 {
				t.Errorf("%s: the broken worker's run: bin %s, expect %v", r.Name, r.Bin, r.Expect)
			}
			expects[r.Self] = true
			continue
		}
		if r.Bin == b.Real {
			if len(r.Expect) > 0 {
				t.Errorf("%s: the real build must show no violation", r.Name)
			}
			continue
		}
		if len(r.Expect) == 0 {
			t.Errorf("%s: a broken build (%s) expects nothing", r.Name, r.Bin)
		}
		expects[r.Bin] = true
	}
	for _, bin := range []string{b.NoFence, b.NoAbsence, b.NoVerify, b.EarlyAck, b.StaleReads, b.DoubleGrant, b.TokenReuse,
		b.NoReportID, b.NoRelease, b.OpenPeer, b.NoDelay, b.Refire, b.NoSelfStop} {
		if !expects[bin] {
			t.Errorf("no run of %s", bin)
		}
	}
	// The outsider attacks a secure run and an insecure one.
	outsider := map[bool]bool{}
	for _, r := range runs {
		kinds, err := nemesis.Select(r.Nemesis, r.Nodes, r.Net == NetProxy)
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		if slices.ContainsFunc(kinds, func(k *nemesis.Kind) bool { return k.Family == nemesis.FamilyOutsider }) {
			outsider[r.Secure] = true
		}
	}
	if !outsider[true] || !outsider[false] {
		t.Errorf("the outsider attacks secure runs %v, insecure runs %v: want both", outsider[true], outsider[false])
	}
	// The flood runs beside a secure run and an insecure one, and a run
	// of the real build fills disks.
	flood, disks := map[bool]bool{}, false
	for _, r := range runs {
		if r.Flood {
			flood[r.Secure] = true
		}
		kinds, _ := nemesis.Select(r.Nemesis, r.Nodes, r.Net == NetProxy)
		disks = disks || r.Bin == b.Real && slices.ContainsFunc(kinds, func(k *nemesis.Kind) bool { return k.Disk })
	}
	if !flood[true] || !flood[false] || !disks {
		t.Errorf("the flood beside secure runs %v, insecure runs %v; disk faults %v: want all", flood[true], flood[false], disks)
	}
	if _, err := Profile("nightly", b, "/self", "/out", 0); err == nil {
		t.Error("an unknown profile was accepted")
	}
	soak, err := Profile("soak", b, "/self", "/out", 0)
	if err != nil || len(soak) != 1 || soak[0].Nodes != 5 || soak[0].Timings != ProductionTimings {
		t.Errorf("soak: %+v, %v", soak, err)
	}
}

func TestJudge(t *testing.T) {
	viol := checker.Report{Results: []checker.Result{
		{Name: "tokens", Invariant: "I1"},
		{Name: "fencing", Invariant: "I5", Violations: []checker.Violation{{Msg: "stale write kept"}}},
	}}
	clean := checker.Report{Results: []checker.Result{{Name: "tokens", Invariant: "I1"}}}
	cases := []struct {
		name     string
		expect   []string
		report   checker.Report
		problems []string
		passed   bool
	}{
		{"real build, clean", nil, clean, nil, true},
		{"real build, violation", nil, viol, nil, false},
		{"real build, clean but the run went wrong", nil, clean, []string{"drain"}, false},
		{"broken build caught", []string{"I5"}, viol, nil, true},
		{"broken build caught by name", []string{"fencing"}, viol, nil, true},
		{"broken build, another invariant", []string{"I11"}, viol, nil, false},
		{"broken build not caught", []string{"I5"}, clean, nil, false},
		{"broken build, any", []string{"any"}, viol, nil, true},
	}
	for _, c := range cases {
		o := &Outcome{Config: Config{Expect: c.expect}, Report: c.report, Problems: c.problems}
		o.judge()
		if o.Passed != c.passed {
			t.Errorf("%s: passed %v, want %v", c.name, o.Passed, c.passed)
		}
	}
}

// TestCheckerSummary: per checker, the broken runs that caught it, missed
// it, or found it unasked, and the checkers nothing exercises.
func TestCheckerSummary(t *testing.T) {
	report := func(invs ...string) checker.Report {
		var r checker.Report
		for _, c := range checker.Checkers() {
			res := checker.Result{Name: c.Name, Invariant: c.Invariant}
			if slices.Contains(invs, c.Invariant) {
				res.Violations = []checker.Violation{{Msg: "x"}}
			}
			r.Results = append(r.Results, res)
		}
		return r
	}
	outs := []*Outcome{
		{Config: Config{Name: "real"}, Report: report()},
		{Config: Config{Name: "b1", Expect: []string{"I5"}}, Report: report("I5", "I10")},
		{Config: Config{Name: "b2", Expect: []string{"I3", "I4"}}, Report: report("I4")},
	}
	for _, o := range outs {
		o.judge()
	}
	rows := map[string]CheckerRow{}
	for _, r := range CheckerSummary(outs) {
		rows[r.Invariant] = r
	}
	if len(rows) != len(checker.Checkers()) {
		t.Fatalf("%d rows", len(rows))
	}
	check := func(inv string, caught, missed, also []string, unexercised bool) {
		t.Helper()
		r := rows[inv]
		if !slices.Equal(r.Caught, caught) || !slices.Equal(r.Missed, missed) || !slices.Equal(r.AlsoFound, also) || r.Unexercised != unexercised {
			t.Errorf("%s: %+v", inv, r)
		}
	}
	check("I5", []string{"b1"}, nil, nil, false)
	check("I10", nil, nil, []string{"b1"}, false)
	check("I3", nil, []string{"b2"}, nil, false)
	check("I4", []string{"b2"}, nil, nil, false)
	check("I1", nil, nil, nil, true)
	var b strings.Builder
	CheckerTable(&b, CheckerSummary(outs))
	for _, want := range []string{"MISSED b2", "none: no broken build exercises it", "also (unexpected) b1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestRun is a whole run against real processes: the real build, secure
// (peer mutual TLS, API TLS, tokens), through a leader kill, the
// outsider's attacks and a follower's full disk (as root), with the flood
// beside the load, must pass, and the build without fence checks,
// insecure, must be caught by I5. It builds both binaries and jepsen-lite
// itself.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real clusters")
	}
	dir := t.TempDir()
	bins := BuildsIn(dir)
	for _, b := range []struct{ out, tags, pkg string }{
		{filepath.Join(dir, "jepsen-lite"), "", "github.com/leasehold/leasehold/jepsen-lite/cmd/jepsen-lite"},
		{bins.Real, "chaos", "github.com/leasehold/leasehold/cmd/leasehold"},
		{bins.NoFence, "chaos,chaos_nofence", "github.com/leasehold/leasehold/cmd/leasehold"},
	} {
		if err := testbin.Build(b.out, b.tags, b.pkg); err != nil {
			t.Fatal(err)
		}
	}

	run := func(name, bin, nemesis string, secure bool, expect ...string) *Outcome {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		o, err := Run(ctx, Config{Name: name, Bin: bin, Self: filepath.Join(dir, "jepsen-lite"), Out: filepath.Join(dir, name),
			Nemesis: strings.Split(nemesis, ","), Duration: 3 * time.Second, Workers: 2, Concurrency: 2, Expect: expect, Secure: secure,
			Flood: secure})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var b strings.Builder
		o.Summary(&b)
		t.Logf("%s", b.String())
		return o
	}

	real := run("real", bins.Real, "kill-leader,outsider,disk-follower", true)
	if !real.Passed {
		t.Fatalf("the real build failed a leader kill: %v", real.Problems)
	}
	if real.Report.Faults["kill-leader"] == 0 || real.Report.Faults["outsider"] == 0 {
		t.Errorf("no leader was killed or no outsider attacked: %v", real.Report.Faults)
	}
	switch {
	case len(real.Notes) > 0:
		// Not root: skipped, and said so.
		if real.Report.Faults["disk-follower"] != 0 || !strings.Contains(real.Notes[0], "disk faults skipped") {
			t.Errorf("notes %v, faults %v", real.Notes, real.Report.Faults)
		}
	case real.Report.Faults["disk-follower"] == 0 || real.Report.DiskReadyMs == nil:
		t.Errorf("no disk was filled, or its node not seen ready again: %v", real.Report.Faults)
	}
	// The run's log store is the default, the WAL: its segments live in wal/.
	if _, err := os.Stat(filepath.Join(dir, "real", "data", "n1", "wal")); err != nil {
		t.Errorf("the nodes' data is not kept: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "real")); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "disk" }) {
		t.Error("the disks' mount points are left")
	}
	if f1, _ := real.Report.Result("F1"); real.Report.FloodCalls == 0 || real.Report.FloodServed != 0 ||
		f1.Stats["calls_admin-call"] == 0 || f1.Stats["calls_idle-conn"] == 0 || f1.Stats["final_events"] == 0 {
		t.Errorf("the flood did not run or was not checked: %d calls, %v", real.Report.FloodCalls, f1.Stats)
	}
	if o1, _ := real.Report.Result("O1"); o1.Stats["outsider_attempts"] == 0 || o1.Stats["attempts_raft-timeout-now"] == 0 || len(o1.Notes) > 0 {
		t.Errorf("the outsider's attacks on a secure run were not all made and checked: %v %v", o1.Stats, o1.Notes)
	}
	if real.Report.Ops[history.OpReport].OK == 0 || real.Report.Ops[history.OpAcquire].OK == 0 {
		t.Errorf("no work was done: %v", real.Report.Ops)
	}
	for _, f := range []string{"history.jsonl", "report.json", "logs/n1.log"} {
		if _, err := os.Stat(filepath.Join(dir, "real", f)); err != nil {
			t.Error(err)
		}
	}
	// Secrets stay in their 0600 files: no token in a log, a history or
	// the report.
	for _, role := range tokenRoles {
		tok, err := os.ReadFile(filepath.Join(dir, "real", "pki", "token-"+role))
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(filepath.Join(dir, "real", "pki", "token-"+role)); fi.Mode().Perm() != 0o600 {
			t.Errorf("token file mode %v", fi.Mode())
		}
		files, _ := filepath.Glob(filepath.Join(dir, "real", "*.*"))
		logs, _ := filepath.Glob(filepath.Join(dir, "real", "logs", "*"))
		for _, f := range append(files, logs...) {
			if strings.HasSuffix(f, ".toml") {
				continue // the nodes' configurations (0600) hold them
			}
			if b, _ := os.ReadFile(f); strings.Contains(string(b), strings.TrimSpace(string(tok))) {
				t.Errorf("the %s token is in %s", role, f)
			}
		}
	}

	broken := run("nofence", bins.NoFence, "none", false, "I5")
	if !broken.Passed || !slices.Contains(broken.Caught, "I5") {
		t.Fatalf("the build without fence checks was not caught: caught %v, problems %v", broken.Caught, broken.Problems)
	}
}
