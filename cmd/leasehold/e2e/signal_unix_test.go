//go:build unix

package e2e

import "syscall"

// signalPID signals pid, or with a negative pid the process group -pid.
func signalPID(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
