package runner

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/localcluster"
)

// proc is one node or worker, across its incarnations: killed, it can be
// started again with the same command line (a worker's names its
// incarnation). Each incarnation is a localcluster.Process, the launcher's
// process handling; what stays here is what a chaos run adds to it
// (incarnations, pausing, workers killed for good).
type proc struct {
	name    string
	argv    func(incarnation int) []string
	env     []string
	logPath string

	mu          sync.Mutex
	incarnation int
	cur         *localcluster.Process // nil before the first start
	paused      bool
	gone        bool // killed for good: never restarted
}

// start starts the next incarnation.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil && !p.cur.Exited() {
		return fmt.Errorf("runner: %s is running", p.name)
	}
	log, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// The child has its own copy.
	defer log.Close()
	p.incarnation++
	argv := p.argv(p.incarnation)
	fmt.Fprintf(log, "--- %s incarnation %d: %s\n", time.Now().Format(time.RFC3339Nano), p.incarnation, strings.Join(argv, " "))
	cur, err := localcluster.StartProcess(localcluster.ProcessConfig{Argv: argv, Env: p.env, Stdout: log, Stderr: log})
	if err != nil {
		return fmt.Errorf("runner: start %s: %w", p.name, err)
	}
	p.cur, p.paused = cur, false
	return nil
}

// current is the current incarnation, if it runs (paused or not).
func (p *proc) current() *localcluster.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || p.cur.Exited() {
		return nil
	}
	return p.cur
}

// alive reports whether the current incarnation runs (paused or not).
func (p *proc) alive() bool { return p.current() != nil }

// isPaused reports whether it is SIGSTOPped.
func (p *proc) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || p.cur.Exited() {
		return fmt.Errorf("runner: %s is not running", p.name)
	}
	switch sig {
	case sigstop:
		p.paused = true
	case sigcont:
		p.paused = false
	}
	return p.cur.Signal(sig)
}

// kill sends SIGKILL (it works on a paused process too) and waits.
func (p *proc) kill() error {
	cur := p.unpause()
	if cur == nil {
		return fmt.Errorf("runner: %s is not running", p.name)
	}
	cur.Kill()
	return nil
}

// stop ends it in order: SIGCONT, SIGTERM, up to grace to exit, SIGKILL.
func (p *proc) stop(grace time.Duration) {
	if cur := p.unpause(); cur != nil {
		cur.Stop(grace)
	}
}

// unpause marks it running (a signal to end it follows) and returns the
// current incarnation, nil if none runs.
func (p *proc) unpause() *localcluster.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
	if p.cur == nil || p.cur.Exited() {
		return nil
	}
	return p.cur
}

// exitErr says how the last incarnation ended, if it did.
func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return nil
	}
	if st := p.cur.State(); st != nil && !st.Success() {
		return errors.New(st.String())
	}
	return nil
}

func (p *proc) currentIncarnation() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.incarnation
}
