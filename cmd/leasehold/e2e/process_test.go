package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bounds on waits. They are generous: they only decide how long a broken
// build takes to fail, never whether a working one passes.
const (
	cliBound     = 30 * time.Second // one CLI command, end to end
	readyBound   = 30 * time.Second // a cluster electing its first leader
	exitBound    = 20 * time.Second // a process told to stop
	jobBound     = 20 * time.Second // a job reaching a state
	workerGrace  = 5 * time.Second  // SIGTERM to SIGKILL for a worker at cleanup
	devStopGrace = 10 * time.Second // SIGTERM to SIGKILL for `leasehold dev` at cleanup
)

func requireBinary(t testing.TB) {
	t.Helper()
	if leaseholdBin == "" {
		t.Skip("end-to-end tests do not run with -short")
	}
}

// baseEnv is this process's environment without LEASEHOLD_* variables: a
// test says where the cluster is, a developer's shell does not.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			env = append(env, kv)
		}
	}
	return env
}

// syncBuffer collects a process's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a long-running leasehold process (a server, a worker, dev).
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{} // closed when the process has been waited for
}

// startProc starts the binary. When the test ends the process gets SIGTERM
// and grace to exit (none: SIGKILL at once), then SIGKILL, and is waited
// for; its output is logged if the test failed.
func startProc(t testing.TB, name string, grace time.Duration, env []string, args ...string) *proc {
	t.Helper()
	return startProcBin(t, leaseholdBin, name, grace, env, args...)
}

// startProcBin is startProc with another leasehold binary (an older build).
func startProcBin(t testing.TB, bin, name string, grace time.Duration, env []string, args ...string) *proc {
	t.Helper()
	requireBinary(t)
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// A worker's command runs in a process group of its own; should one
	// outlive its worker, it must not keep Wait waiting for the pipes.
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(grace)
		if t.Failed() {
			t.Logf("%s: leasehold %s\n%s\n--- stdout:\n%s\n--- stderr:\n%s", name, strings.Join(args, " "),
				p.cmd.ProcessState, tail(p.stdout.String()), tail(p.stderr.String()))
		}
	})
	return p
}

func tail(s string) string {
	const max = 8 << 10
	if len(s) > max {
		return "..." + s[len(s)-max:]
	}
	return s
}

// stop ends the process: SIGTERM and up to grace to exit, then SIGKILL. It
// returns once the process has been waited for.
func (p *proc) stop(grace time.Duration) {
	if grace > 0 && !p.exited() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	if !p.exited() {
		p.cmd.Process.Kill()
	}
	<-p.done
}

// kill sends SIGKILL and waits for the process to exit.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	p.cmd.Process.Kill()
	p.wait(t, exitBound)
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to bound for the process to exit and returns its exit code
// (-1 for a signal).
func (p *proc) wait(t testing.TB, bound time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(bound):
		t.Fatalf("%s did not exit within %s", p.name, bound)
		return 0
	}
}

// result is a finished CLI command.
type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs one command to its end (at most cliBound).
func runCLI(t testing.TB, env []string, args ...string) result {
	t.Helper()
	requireBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), cliBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, leaseholdBin, args...)
	cmd.Env = env
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("leasehold %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("leasehold %s: no exit within %s; stderr: %s", strings.Join(args, " "), cliBound, stderr.String())
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
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

// waitFor polls cond until it returns nil, and fails the test with cond's
// last complaint after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(wait)
	}
}

// devPorts are `leasehold dev`'s; a test cluster never takes them.
var devPorts = map[int]bool{7701: true, 7702: true, 7703: true, 7711: true, 7712: true, 7713: true}

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

// freeAddr returns a loopback address whose port was free a moment ago and
// has not been handed out before in this process.
func freeAddr(t testing.TB) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !devPorts[port] && !portsUsed[port] {
			portsUsed[port] = true
			return fmt.Sprintf("127.0.0.1:%d", port)
		}
	}
	t.Fatal("no free loopback port")
	return ""
}
