package main

import (
	"slices"
	"testing"
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
