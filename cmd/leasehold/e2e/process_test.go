package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/localcluster"
	"github.com/leasehold/leasehold/internal/testbin"
	"github.com/leasehold/leasehold/internal/testwait"
)

// Bounds on waits, before testwait scales them to the machine. They are
// generous: they only decide how long a broken build takes to fail, never
// whether a working one passes.
const (
	cliBound     = 30 * time.Second // one CLI command, end to end
	readyBound   = 30 * time.Second // a cluster electing its first leader
	exitBound    = 20 * time.Second // a process told to stop
	jobBound     = 20 * time.Second // a job reaching a state
	workerGrace  = 5 * time.Second  // SIGTERM to SIGKILL for a worker at cleanup
	devStopGrace = 10 * time.Second // SIGTERM to SIGKILL for `leasehold dev` at cleanup
)

// waitFor polls cond until it returns nil, and fails the test with cond's
// last complaint once bound, scaled to the machine, has passed.
var waitFor = testwait.For

// tail is the end of a long output.
var tail = testbin.Tail

// baseEnv is this process's environment without LEASEHOLD_* variables: a
// test says where the cluster is, a developer's shell does not.
func baseEnv() []string { return localcluster.Env() }

// proc is a long-running leasehold process (a server, a worker, dev).
type proc = testbin.Proc

// startProc starts the binary under test. When the test ends the process
// gets SIGTERM and grace to exit (none: SIGKILL at once), then SIGKILL, and
// is waited for; its output is logged if the test failed.
func startProc(t testing.TB, name string, grace time.Duration, env []string, args ...string) *proc {
	t.Helper()
	return testbin.Start(t, name, grace, env, append([]string{testbin.Leasehold(t)}, args...)...)
}

// result is a finished CLI command.
type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs one command to its end (at most cliBound, scaled).
func runCLI(t testing.TB, env []string, args ...string) result {
	t.Helper()
	r := testbin.Run(t, cliBound, env, append([]string{testbin.Leasehold(t)}, args...)...)
	return result{stdout: r.Stdout, stderr: r.Stderr, code: r.Code}
}

// mustCLI runs a command that must succeed and returns its stdout.
func mustCLI(t testing.TB, env []string, args ...string) string {
	t.Helper()
	r := runCLI(t, env, args...)
	if r.code != 0 {
		t.Fatalf("leasehold %s: exit %d, stderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// decodeJSON unmarshals a command's -o json output.
func decodeJSON(t testing.TB, what, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s: not JSON (%v):\n%s", what, err, out)
	}
}
