package runner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one node or worker, across its incarnations: killed, it can be
// started again with the same command line (a worker's names its
// incarnation).
type proc struct {
	name    string
	argv    func(incarnation int) []string
	env     []string
	logPath string

	mu          sync.Mutex
	incarnation int
	cmd         *exec.Cmd
	done        chan struct{} // closed once the current process was waited for
	paused      bool
	gone        bool // killed for good: never restarted
}

// start starts the next incarnation.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		return fmt.Errorf("runner: %s is running", p.name)
	}
	log, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.incarnation++
	argv := p.argv(p.incarnation)
	fmt.Fprintf(log, "--- %s incarnation %d: %s\n", time.Now().Format(time.RFC3339Nano), p.incarnation, strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group keeps a terminal's ^C away from it (the runner
	// stops it in order), and it dies with the runner whatever happens.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("runner: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(done)
	}()
	p.cmd, p.done, p.paused = cmd, done, false
	return nil
}

// alive reports whether the current incarnation runs (paused or not).
func (p *proc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !closed(p.done)
}

// isPaused reports whether it is SIGSTOPped.
func (p *proc) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.done) {
		return fmt.Errorf("runner: %s is not running", p.name)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return p.cmd.Process.Signal(sig)
}

// kill sends SIGKILL (it works on a paused process too) and waits.
func (p *proc) kill() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.paused = false
	p.mu.Unlock()
	if cmd == nil || closed(done) {
		return fmt.Errorf("runner: %s is not running", p.name)
	}
	cmd.Process.Kill()
	<-done
	return nil
}

// stop ends it in order: SIGCONT, SIGTERM, up to grace to exit, SIGKILL.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.paused = false
	p.mu.Unlock()
	if cmd == nil || closed(done) {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		cmd.Process.Kill()
		<-done
	}
}

// exitErr says how the last incarnation ended, if it did.
func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || !closed(p.done) {
		return nil
	}
	if p.cmd.ProcessState.Success() {
		return nil
	}
	return errors.New(p.cmd.ProcessState.String())
}

func (p *proc) currentIncarnation() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.incarnation
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// childEnv is this process's environment without LEASEHOLD_* variables,
// plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}
