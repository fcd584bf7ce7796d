package localcluster

import (
	"os"
	"syscall"
)

// procAttr puts a node in its own process group, and has the kernel kill it
// should the launcher die first (no server outlives a killed test).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// resume continues a stopped process.
func resume(p *os.Process) { p.Signal(syscall.SIGCONT) }
