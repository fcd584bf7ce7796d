//go:build unix && !linux

package localcluster

import (
	"os"
	"syscall"
)

// procAttr puts a node in its own process group. Off Linux there is no
// parent-death signal: a launcher killed outright leaves its nodes running.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// resume continues a stopped process.
func resume(p *os.Process) { p.Signal(syscall.SIGCONT) }
