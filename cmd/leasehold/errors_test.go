package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/client"
)

// A reason is said once: the server's message words its sentinel, which
// the reason in front already says.
func TestOneLineSaysTheReasonOnce(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&client.Error{Reason: "NOT_FOUND", Message: "not found: job nosuch"}, "NOT_FOUND: job nosuch"},
		{fmt.Errorf("leasehold: get: %w", &client.Error{Reason: "NOT_FOUND", Message: "Not found: job x"}), "NOT_FOUND: job x"},
		{&client.Error{Reason: "JOB_NOT_DEAD", Message: "job d is queued", Field: "id"}, "JOB_NOT_DEAD: job d is queued (field id)"},
		{&client.Error{Reason: "INVALID_ARGUMENT", Message: "invalid argument: queue \"a b\"\n bad"}, `INVALID_ARGUMENT: queue "a b" bad`},
		{errors.New("leasehold: dial: refused"), "dial: refused"},
	} {
		if got := oneLine(tc.err); got != tc.want {
			t.Errorf("oneLine(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// 2 for usage, 3 (or a worker's outcome) only from cli.Exit, else 1.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{&cmdUsageError{msg: "x"}, 2},
		{fmt.Errorf("%w: bad", errUsage), 2},
		{cli.Exit("", 3), 3},
		{cli.Exit("", 75), 75},
		{errors.New("failed"), 1},
		{&client.Error{Reason: "NOT_FOUND"}, 1},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
