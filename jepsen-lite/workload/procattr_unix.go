//go:build unix

package workload

import "syscall"

// groupAttr starts a process leading a process group of its own.
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
