package main

import (
	"slices"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

func TestInterspersedFlags(t *testing.T) {
	app := newApp()
	for _, tc := range []struct{ in, want []string }{
		{[]string{"lh", "job", "get", "J", "-o", "json"}, []string{"lh", "job", "get", "-o", "json", "J"}},
		{[]string{"lh", "-o", "json", "job", "get", "J"}, []string{"lh", "-o", "json", "job", "get", "J"}},
		{[]string{"lh", "lease", "check", "J", "7", "--endpoints=a:1"}, []string{"lh", "lease", "check", "--endpoints=a:1", "J", "7"}},
		{[]string{"lh", "job", "get", "--stale", "J"}, []string{"lh", "job", "get", "--stale", "J"}},
		{[]string{"lh", "job", "list", "--stale", "-o", "json"}, []string{"lh", "job", "list", "--stale", "-o", "json"}},
		{[]string{"lh", "worker", "run", "--id", "w", "--", "sh", "-c", "x -o y"}, []string{"lh", "worker", "run", "--id", "w", "--", "sh", "-c", "x -o y"}},
		{[]string{"lh", "worker", "deregister", "W", "--force"}, []string{"lh", "worker", "deregister", "--force", "W"}},
		{[]string{"lh", "version"}, []string{"lh", "version"}},
	} {
		if got := interspersed(app, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestJobTimeoutIsNotTheCommandsBound: job submit's --timeout is the job's;
// the bound on the command itself is the global --timeout, given before
// the command, or its default.
func TestJobTimeoutIsNotTheCommandsBound(t *testing.T) {
	app := newApp()
	submit := app.Command("job").Command("submit")
	var bound, job time.Duration
	submit.Action = func(c *cli.Context) error {
		bound, job = lookup(c, "timeout").Duration("timeout"), c.Duration("timeout")
		return nil
	}
	for _, tc := range []struct {
		args       []string
		bound, job time.Duration
	}{
		{[]string{"lh", "job", "submit", "--timeout", "2s"}, 15 * time.Second, 2 * time.Second},
		{[]string{"lh", "--timeout", "30s", "job", "submit", "--timeout", "2s"}, 30 * time.Second, 2 * time.Second},
		{[]string{"lh", "--timeout", "30s", "job", "submit"}, 30 * time.Second, 0},
	} {
		bound, job = -1, -1
		if err := app.Run(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if bound != tc.bound || job != tc.job {
			t.Errorf("%q: command bound %s, job timeout %s; want %s and %s", tc.args, bound, job, tc.bound, tc.job)
		}
	}
}
