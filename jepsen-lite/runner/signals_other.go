//go:build !unix

package runner

import "syscall"

// Off Unix there is no stopping a process nor kill(2): Run refuses
// (errUnsupported) before any of these is used; they let the package
// build.
const (
	sigstop = syscall.Signal(-1)
	sigcont = syscall.Signal(-2)
)

func killPID(int) {}
