package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/leasehold/leasehold/internal/testbin"
)

// `leasehold dev` serves on fixed ports that the CLI's default endpoints
// reach with no flag; Ctrl-C stops it with exit 0, and a --data-dir it was
// given keeps the cluster's state for the next start.
//
// Not parallel: it needs the fixed ports 7701-7703 and 7711-7713, and is
// skipped if anything (a developer's own `leasehold dev`) holds one.
func TestDevCluster(t *testing.T) {
	testbin.Leasehold(t)
	skipUnlessDevPortsFree(t)
	dir := filepath.Join(t.TempDir(), "dev") // made by dev, with its log file
	// No --endpoints and no LEASEHOLD_ENDPOINTS: the defaults must reach dev.
	env := baseEnv()

	interrupt := func(p *proc) {
		t.Helper()
		p.Signal(syscall.SIGINT)
		if code := p.Wait(t, exitBound); code != 0 {
			t.Fatalf("leasehold dev exited %d after SIGINT; stderr: %s", code, p.Stderr())
		}
		if !strings.Contains(p.Stdout(), "leasehold dev: stopping") {
			t.Errorf("stdout %q lacks the stopping line", p.Stdout())
		}
	}

	dev := startDev(t, env, dir)
	if !strings.Contains(dev.Stdout(), "data in "+dir) {
		t.Errorf("dev's banner %q does not name the data dir %s", dev.Stdout(), dir)
	}
	// The nodes log at info to a file the banner names: a leader's
	// election is there to explain.
	logFile := filepath.Join(dir, "leasehold-dev.log")
	if !strings.Contains(dev.Stdout(), "logs: "+logFile) {
		t.Errorf("dev's banner %q does not name the log file %s", dev.Stdout(), logFile)
	}
	if data, err := os.ReadFile(logFile); err != nil || !strings.Contains(string(data), "leadership_established") {
		t.Errorf("dev's log file: %v; it has no leadership_established line:\n%s", err, data)
	}
	mustCLI(t, env, "job", "submit", "--id", "dev-job", "--payload", "from the e2e test")
	interrupt(dev)

	var kept []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			kept = append(kept, rel)
		}
		return nil
	})
	sort.Strings(kept)
	for i := 1; i <= 3; i++ {
		for _, f := range []string{"wal", "node-id"} {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("node-%d", i), f)); err != nil {
				t.Errorf("after dev stopped: %v (kept: %v)", err, kept)
			}
		}
	}

	// The same data dir again: the job is still there.
	dev = startDev(t, env, dir)
	var j jobJSON
	decodeJSON(t, "job get", mustCLI(t, env, "job", "get", "-o", "json", "dev-job"), &j)
	if j.ID != "dev-job" || j.Payload != "from the e2e test" || j.State != "queued" {
		t.Errorf("after a restart on the same data dir: %+v", j)
	}
	interrupt(dev)
}

// skipUnlessDevPortsFree skips the test if anything holds one of `leasehold
// dev`'s fixed ports (the launcher never hands them to a test's node).
// Tests that call it must not be parallel: top-level tests without
// t.Parallel never overlap.
func skipUnlessDevPortsFree(t *testing.T) {
	t.Helper()
	for _, port := range []int{7701, 7702, 7703, 7711, 7712, 7713} {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Skipf("port %d is taken (a leasehold dev running?): %v", port, err)
		}
		l.Close()
	}
}

// startDev starts `leasehold dev --data-dir dir` and waits until the CLI's
// default endpoints reach its leader.
func startDev(t *testing.T, env []string, dir string) *proc {
	t.Helper()
	p := startProc(t, "dev", devStopGrace, env, "dev", "--data-dir", dir)
	waitFor(t, readyBound, "leasehold dev to be ready at the default endpoints", func() error {
		if p.Exited() {
			t.Fatalf("leasehold dev exited: %s", p.Stderr())
		}
		r := runCLI(t, env, "--timeout", "2s", "cluster", "status", "-o", "json")
		if r.code != 0 {
			return fmt.Errorf("exit %d: %s", r.code, strings.TrimSpace(r.stderr))
		}
		var st statusJSON
		decodeJSON(t, "cluster status", r.stdout, &st)
		if !st.Ready || st.LeaderID == "" {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	return p
}
