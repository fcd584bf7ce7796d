//go:build unix

package netem

import (
	"errors"
	"syscall"
)

// alive says whether pid is a running process (one another user owns
// included).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
