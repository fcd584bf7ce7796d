package testbin

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/localcluster"
	"github.com/leasehold/leasehold/internal/testwait"
)

// Proc is a process a test started (a server, a worker, `leasehold dev`,
// a CLI command), with its output kept for the test to read.
type Proc struct {
	*localcluster.Process
	name           string
	stdout, stderr buffer
}

// Start starts argv with env (nil: localcluster.Env()). When the test
// ends the process gets SIGTERM and grace to exit (0: SIGKILL at once),
// then SIGKILL, and is waited for; its output is logged if the test
// failed.
func Start(t testing.TB, name string, grace time.Duration, env []string, argv ...string) *Proc {
	t.Helper()
	return StartFiles(t, name, grace, env, nil, argv...)
}

// StartFiles is Start with files the process inherits as descriptors 3,
// 4, ...; the caller may close them once it returns.
func StartFiles(t testing.TB, name string, grace time.Duration, env []string, files []*os.File, argv ...string) *Proc {
	t.Helper()
	p := start(t, name, env, files, argv)
	t.Cleanup(func() {
		p.Stop(grace)
		if t.Failed() {
			t.Logf("%s: %s\n%s\n--- stdout:\n%s\n--- stderr:\n%s", name, strings.Join(argv, " "),
				p.State(), Tail(p.Stdout()), Tail(p.Stderr()))
		}
	})
	return p
}

func start(t testing.TB, name string, env []string, files []*os.File, argv []string) *Proc {
	t.Helper()
	p := &Proc{name: name}
	// A worker's command runs in a process group of its own; should one
	// outlive its worker, it must not keep the wait waiting for the pipes.
	var err error
	p.Process, err = localcluster.StartProcess(localcluster.ProcessConfig{Argv: argv, Env: env, Stdout: &p.stdout, Stderr: &p.stderr,
		Files: files, WaitDelay: 2 * time.Second})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return p
}

// StartServer starts `leasehold server ARGS` on a Raft and an API port
// bound for it (--raft-fd, --api-fd: no port is picked and released), as
// Start does, and returns it with its API address.
func StartServer(t testing.TB, name string, grace time.Duration, args ...string) (*Proc, string) {
	t.Helper()
	bin := Leasehold(t)
	ports, err := localcluster.BindPorts()
	if err != nil {
		t.Fatal(err)
	}
	defer ports.Close()
	files, err := ports.Files()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	argv := append(append([]string{bin, "server"}, ports.Flags()...), args...)
	return StartFiles(t, name, grace, nil, files, argv...), ports.APIAddr()
}

// Stdout is what it has written to stdout so far.
func (p *Proc) Stdout() string { return p.stdout.String() }

// Stderr is what it has written to stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Wait waits up to bound, scaled to the machine, for the process to exit
// and returns its exit code (-1 for a signal); past the bound it fails the
// test.
func (p *Proc) Wait(t testing.TB, bound time.Duration) int {
	t.Helper()
	timer := time.NewTimer(testwait.Bound(bound))
	defer timer.Stop()
	select {
	case <-p.Done():
		return p.State().ExitCode()
	case <-timer.C:
		t.Fatalf("%s did not exit within %s", p.name, testwait.Bound(bound))
		return 0
	}
}

// Result is a finished command.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Run runs a command to its end; past bound, scaled to the machine, it is
// killed and the test fails.
func Run(t testing.TB, bound time.Duration, env []string, argv ...string) Result {
	t.Helper()
	p := start(t, argv[0], env, nil, argv)
	timer := time.NewTimer(testwait.Bound(bound))
	defer timer.Stop()
	select {
	case <-p.Done():
	case <-timer.C:
		p.Kill()
		t.Fatalf("%s: no exit within %s; stderr: %s", strings.Join(argv, " "), testwait.Bound(bound), Tail(p.Stderr()))
	}
	return Result{Stdout: p.Stdout(), Stderr: p.Stderr(), Code: p.State().ExitCode()}
}

// Tail is the end of a long output.
func Tail(s string) string {
	const max = 8 << 10
	if len(s) > max {
		return "..." + s[len(s)-max:]
	}
	return s
}

// buffer collects a process's output while the test reads it.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
