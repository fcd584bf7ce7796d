//go:build !unix

package supervisor

import "syscall"

// Off Unix there are no sessions, process groups or user signals to build
// a supervisor of: NewRunner and Supervise refuse (errUnsupported) before
// any of these is used. They exist so the package, and the CLI that
// imports it, build everywhere.
var (
	sigKill = syscall.Signal(-1)
	sigLost = syscall.Signal(-2)
)

func kill(int, syscall.Signal) {}

func sessionAttr() *syscall.SysProcAttr { return nil }

func groupAttr() *syscall.SysProcAttr { return nil }
