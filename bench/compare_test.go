package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// compare.sh's table: each figure's median per binary and new/old, the
// lowest and highest run of each binary and whether the two do not
// overlap, and the highest cpu_other_pct of any run, negative ones included (a run
// can read below zero: the host's idle time is sampled apart from the
// processes').
func TestCompareTable(t *testing.T) {
	results := `RESULT op=heartbeat ops_s=100 p50_ms=2 p99_ms=4 cpu_srv_pct=50 allocs_per_op=9 commit_ms_leader=0.6 append_rpc_ms_leader=NA cpu_other_pct=-9.5 case=hb bin=old
RESULT op=heartbeat ops_s=120 p50_ms=1 p99_ms=3 cpu_srv_pct=48 allocs_per_op=8 commit_ms_leader=0.4 append_rpc_ms_leader=NA cpu_other_pct=-13.1 case=hb bin=new
RESULT op=heartbeat ops_s=90 p50_ms=3 p99_ms=5 cpu_srv_pct=50 allocs_per_op=9 commit_ms_leader=0.7 append_rpc_ms_leader=NA cpu_other_pct=-5.7 case=hb bin=old
RESULT op=heartbeat ops_s=140 p50_ms=1 p99_ms=2 cpu_srv_pct=49 allocs_per_op=8 commit_ms_leader=0.45 append_rpc_ms_leader=NA cpu_other_pct=-7.0 case=hb bin=new
RESULT op=heartbeat ops_s=110 p50_ms=2 p99_ms=4 cpu_srv_pct=51 allocs_per_op=9 commit_ms_leader=0.5 append_rpc_ms_leader=NA cpu_other_pct=-8.0 case=hb bin=old
RESULT op=heartbeat ops_s=130 p50_ms=1 p99_ms=4 cpu_srv_pct=47 allocs_per_op=8 commit_ms_leader=0.5 append_rpc_ms_leader=NA cpu_other_pct=-6.1 case=hb bin=new
RESULT op=scale ops_s=1234567.8 p50_ms=2 p99_ms=4 cpu_srv_pct=50 cpu_other_pct=-9.5 case=one bin=old
RESULT op=scale ops_s=120 p50_ms=1 p99_ms=3 cpu_srv_pct=48 cpu_other_pct=-9.5 case=one bin=new
`
	path := filepath.Join(t.TempDir(), "results.txt")
	if err := os.WriteFile(path, []byte(results), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "compare.sh", "table", path).CombinedOutput()
	if err != nil {
		t.Fatalf("compare.sh table: %v\n%s", err, out)
	}
	for _, want := range []string{
		`(?m)^hb\s+ops/s\s+100\s+130\s+1\.30\s+90\.\.110\s+120\.\.140\s+apart$`,
		`(?m)^\s+p50ms\s+2\s+1\s+0\.50\s+2\.\.3\s+1\.\.1\s+apart$`,
		`(?m)^\s+p99ms\s+4\s+3\s+0\.75\s+4\.\.5\s+2\.\.4$`, // runs that overlap
		`(?m)^\s+alloc\s+9\s+8\s+0\.89\s+9\.\.9\s+8\.\.8\s+apart$`,
		`(?m)^\s+commit\s+0\.6\s+0\.45\s+0\.75\s+0\.5\.\.0\.7\s+0\.4\.\.0\.5$`,                 // the leader's mean commit; overlapping
		`(?m)^one\s+ops/s\s+1234567\.8\s+120\s+0\.00\s+1234567\.8\.\.1234567\.8\s+120\.\.120$`, // one run a side: no spread to judge by; the runs' figures as printed
		`(?m)^highest cpu_other_pct seen: -5\.7$`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("no line matching %s in:\n%s", want, strings.TrimSpace(string(out)))
		}
	}
	// A figure no run reported (NA, or no key at all) has no row.
	for _, absent := range []string{`(?m)^\s+rpc\s`, `(?m)^\s+logw\s`, `(?m)^\s+own\s`} {
		if regexp.MustCompile(absent).Match(out) {
			t.Errorf("a line matching %s in:\n%s", absent, strings.TrimSpace(string(out)))
		}
	}
}
