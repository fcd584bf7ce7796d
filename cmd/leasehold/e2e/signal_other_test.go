//go:build !unix

package e2e

import (
	"errors"
	"syscall"
)

// signalPID: off Unix there is no kill(2) nor process groups; the tests that
// need it (the server and `worker run` need Linux) fail saying so.
func signalPID(int, syscall.Signal) error { return errors.ErrUnsupported }
