package runner

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// RebootShellWorker does to a shell worker what a reboot of its machine
// does: its `worker run` process, every supervisor it started and every
// command they run die at once (SIGKILL). The commands' watchers are the
// harness's, not the machine's: they stay and record each command's stop
// when it has died. It returns once none of those processes is left.
func (c *cluster) RebootShellWorker(name string) error {
	var p *proc
	for _, s := range c.shells {
		if s.name == name {
			p = s
		}
	}
	if p == nil {
		return fmt.Errorf("runner: no shell worker %q", name)
	}
	if err := p.kill(); err != nil {
		return err
	}
	// Supervisors name the state directory (--job-dir STATE/jobs/TOKEN),
	// and so do commands (--deadline-file STATE/deadline). A supervisor
	// killed after its fork but before it started its command's program
	// leaves a child the next scan finds; a dead process's command line
	// is empty (a zombie), so the scans end.
	mark := []byte(c.dir("state", name) + string(filepath.Separator))
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := machineProcs(mark)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("runner: reboot of %s: processes %v still alive after 10s", name, pids)
		}
		for _, pid := range pids {
			killPID(pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// machineProcs are the live processes with an argument holding mark,
// except the watchers (jepsen-lite shell-watch).
func machineProcs(mark []byte) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, mark) {
			continue
		}
		args := bytes.Split(b, []byte{0})
		if len(args) > 1 && string(args[1]) == "shell-watch" {
			continue
		}
		out = append(out, pid)
	}
	return out
}
