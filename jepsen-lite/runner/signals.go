package runner

import "syscall"

const (
	sigstop = syscall.SIGSTOP
	sigcont = syscall.SIGCONT
)
