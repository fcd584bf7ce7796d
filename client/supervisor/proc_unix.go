//go:build unix

package supervisor

import "syscall"

// The process control a supervisor is made of: a session of its own,
// process groups, SIGUSR1 and SIGUSR2, kill(2). proc_other.go stands in
// elsewhere.
var (
	sigKill = syscall.SIGUSR1 // kill: nothing graceful
	sigLost = syscall.SIGUSR2 // lost: the lease is ending now
)

// kill signals pid, or with a negative pid the process group -pid.
func kill(pid int, sig syscall.Signal) { _ = syscall.Kill(pid, sig) }

// sessionAttr starts a process in a session of its own.
func sessionAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// groupAttr starts a process leading a process group of its own.
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
