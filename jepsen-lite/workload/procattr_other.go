//go:build !unix

package workload

import "syscall"

// groupAttr: off Unix there are no process groups (jepsen-lite needs
// Linux; this only lets the package build).
func groupAttr() *syscall.SysProcAttr { return nil }
