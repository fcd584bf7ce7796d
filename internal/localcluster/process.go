package localcluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// ProcessConfig says how to start a Process.
type ProcessConfig struct {
	// Argv is the command and its arguments. Required.
	Argv []string
	// Env is its environment (nil: Env()).
	Env []string
	// Stdout and Stderr take its output (nil: discarded).
	Stdout, Stderr io.Writer
	// Files are inherited as file descriptors 3, 4, ...
	Files []*os.File
	// WaitDelay bounds the wait for its output pipes once it has exited,
	// should a child of its own hold them (0: no bound).
	WaitDelay time.Duration
}

// Process is one run of a command, in a process group of its own (a
// terminal's ^C reaches its parent, which stops it in order) and killed
// should its parent die (Pdeathsig).
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has been waited for
}

// StartProcess starts the command. Its Files may be closed once it
// returns: the process has its own copies.
func StartProcess(cfg ProcessConfig) (*Process, error) {
	if len(cfg.Argv) == 0 {
		return nil, errors.New("localcluster: no command")
	}
	cmd := exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
	cmd.Env = cfg.Env
	if cmd.Env == nil {
		cmd.Env = Env()
	}
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles, cmd.WaitDelay = cfg.Stdout, cfg.Stderr, cfg.Files, cfg.WaitDelay
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("localcluster: start %s: %w", cfg.Argv[0], err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process has exited and been waited for.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// State is how it ended; nil while it runs.
func (p *Process) State() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.cmd.ProcessState
}

// Pid is its process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig; it is an error once the process has exited.
func (p *Process) Signal(sig os.Signal) error {
	if p.Exited() {
		return fmt.Errorf("localcluster: process %d has exited", p.Pid())
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL (a crash: no handover, no flush; it works on a
// stopped process too) and returns once the process has been waited for.
func (p *Process) Kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// Stop ends it in order: SIGCONT (should it be stopped), SIGTERM, up to
// grace to exit, then SIGKILL. It returns once the process has been
// waited for; grace 0 is SIGKILL at once.
func (p *Process) Stop(grace time.Duration) {
	if grace > 0 && !p.Exited() {
		resume(p.cmd.Process)
		p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
		}
	}
	p.Kill()
}

// Env is this process's environment without LEASEHOLD_* variables, plus
// extra: a child's flags say where its cluster is, not the shell it was
// started from.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}
