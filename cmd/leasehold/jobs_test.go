package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/transport"
)

// Ctrl-C ends a watch or a worker cleanly, however the cancellation is
// wrapped; a node's refusal that only says "context canceled" (it was
// shutting down) is still an error, as is a deadline.
func TestIgnoreCancel(t *testing.T) {
	remote := &client.Error{Reason: transport.ReasonShuttingDown, Code: connect.CodeUnavailable, Message: "context canceled"}
	for _, tc := range []struct {
		name    string
		err     error
		ignored bool
	}{
		{"none", nil, true},
		{"canceled", context.Canceled, true},
		{"wrapped", fmt.Errorf("leasehold: worker w1: register: %w", context.Canceled), true},
		{"connect", connect.NewError(connect.CodeCanceled, context.Canceled), true},
		{"node's refusal", remote, false},
		{"deadline", context.DeadlineExceeded, false},
		{"other", errors.New("boom"), false},
	} {
		got := ignoreCancel(tc.err)
		if tc.ignored && got != nil || !tc.ignored && got != tc.err {
			t.Errorf("%s: ignoreCancel(%v) = %v", tc.name, tc.err, got)
		}
	}
}
