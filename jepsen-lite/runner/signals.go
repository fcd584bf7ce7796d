//go:build unix

package runner

import "syscall"

const (
	sigstop = syscall.SIGSTOP
	sigcont = syscall.SIGCONT
)

// killPID sends SIGKILL to pid.
func killPID(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }
