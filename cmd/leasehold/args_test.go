package main

import (
	"slices"
	"strings"
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

// TestStrayArgumentIsAUsageError: a command that names no arguments
// refuses one with exit status 2 before it does anything; `job purge
// --queue q deadA` purged every dead job of q and ignored deadA.
func TestStrayArgumentIsAUsageError(t *testing.T) {
	t.Chdir(t.TempDir()) // tls ca create, had it run, writes here
	var leaves [][]string
	calls := map[string]bool{} // commands that call a server: given one that is not there
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(slices.Clone(path), c.Name)
			walk(p, c.Subcommands)
			if c.Action != nil && c.ArgsUsage == "" {
				leaves = append(leaves, p)
				calls[strings.Join(p, " ")] = slices.ContainsFunc(c.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), "endpoints") })
			}
		}
	}
	walk(nil, newApp().Commands)
	if len(leaves) < 10 {
		t.Fatalf("only %d commands without arguments: %q", len(leaves), leaves)
	}
	for _, p := range leaves {
		// No server listens on port 1: a command that got past the check
		// would fail with exit status 1 (unavailable), not 2.
		args := append(slices.Clone(p), "stray-arg")
		if calls[strings.Join(p, " ")] {
			args = append(args, "--endpoints", "127.0.0.1:1", "--timeout", "1s")
		}
		r := runCLI(t, args...)
		if r.code != 2 || !strings.Contains(r.stderr, `unexpected argument "stray-arg"`) && !strings.Contains(r.stderr, "Required flag") {
			t.Errorf("leasehold %s: exit %d, %q; want exit 2, unexpected argument", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	// The case that did harm: the stray id is refused, nothing is purged.
	r := runCLI(t, "job", "purge", "--queue", "qd", "deadA", "--endpoints", "127.0.0.1:1")
	if r.code != 2 || !strings.Contains(r.stderr, `unexpected argument "deadA"`) {
		t.Errorf("job purge --queue qd deadA: exit %d, %q", r.code, r.stderr)
	}
}
