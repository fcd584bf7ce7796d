//go:build !unix

package localcluster

import (
	"os"
	"syscall"
)

// procAttr: off Unix there are no process groups or parent-death signals;
// a node is a plain child process (a launcher killed outright leaves its
// nodes running), and Stop's SIGTERM is not delivered, so a node stopped
// with a grace is killed when the grace ends. The server itself needs
// Linux (README, "Platforms"): this only lets the package build.
func procAttr() *syscall.SysProcAttr { return nil }

// resume: there is no stopping a process, so nothing to continue.
func resume(*os.Process) {}
