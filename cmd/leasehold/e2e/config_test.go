package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/localcluster"
	"github.com/leasehold/leasehold/internal/testbin"
	"github.com/leasehold/leasehold/internal/testwait"
)

// A server with a bad configuration exits non-zero at once, and its error
// names the offending key or field.
func TestBadConfigFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		toml  string
		flags []string
		want  string // in stderr
	}{
		{
			name: "unknown key",
			toml: "[plugins.executor]\nrenew_secondz = 5\n",
			want: "plugins.executor.renew_secondz",
		},
		{
			name: "grace not below toleration in the file",
			toml: "[plugins.executor]\nrenew_seconds = 1\ngrace_seconds = 5\ntoleration_seconds = 5\n",
			want: "grace_seconds",
		},
		{
			name: "grace not below toleration in flags",
			// The file alone is valid; the flag overrides it.
			toml:  raftTimingsTOML + "[plugins.executor]\nrenew_seconds = 0.2\ngrace_seconds = 2\ntoleration_seconds = 4\n",
			flags: []string{"--grace-seconds", "4"},
			want:  "grace_seconds",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := filepath.Join(t.TempDir(), "leasehold.toml")
			if err := os.WriteFile(cfg, []byte(tc.toml), 0o600); err != nil {
				t.Fatal(err)
			}
			// Ports and a data dir of its own: should the config be
			// accepted, the server runs (and the bound below fails the test)
			// rather than fights over a port.
			p, _ := testbin.StartServer(t, "server", 0, append([]string{"--config", cfg, "--data-dir", t.TempDir(), "--node-id", "bad",
				"--bootstrap-expect", "1"}, tc.flags...)...)
			if code := p.Wait(t, exitBound); code == 0 {
				t.Errorf("exit 0, want non-zero")
			}
			stderr := p.Stderr()
			if !strings.Contains(stderr, tc.want) || !strings.HasPrefix(stderr, "leasehold: ") {
				t.Errorf("stderr %q, want a \"leasehold: \" error naming %s", stderr, tc.want)
			}
		})
	}
}

// A cluster started with --timing-scale runs on the scaled timings: it
// elects a leader, reports renew, grace and toleration times the scale,
// and elects another leader after the first is killed.
func TestTimingScaleCluster(t *testing.T) {
	t.Parallel()
	// startCluster's 0.2 s / 2 s / 4 s and its Raft 300 ms / 300 ms /
	// 150 ms, halved.
	c := startCluster(t, 3, "--timing-scale", "0.5")
	old := c.waitReady(t)
	var st struct{ Renew, Grace, Toleration string }
	decodeJSON(t, "cluster status", c.cli(t, "cluster", "status", "-o", "json"), &st)
	if st.Renew != "100ms" || st.Grace != "1s" || st.Toleration != "2s" {
		t.Fatalf("cluster status timings %+v, want renew 100ms, grace 1s, toleration 2s", st)
	}
	old.kill(t)
	if leader := c.waitReady(t); leader == old {
		t.Fatalf("the killed node %s still leads", old.id)
	}
}

// A lone --grace-seconds 2, the example, starts a node that
// elects itself: renew and the Raft timeouts, left unset, fit below it.
func TestLoneGraceStarts(t *testing.T) {
	t.Parallel()
	lc, err := localcluster.Start(t.Context(), localcluster.Options{Binary: testbin.Leasehold(t), Nodes: 1, Dir: t.TempDir(),
		Args: []string{"--grace-seconds", "2"}, ReadyTimeout: testwait.Bound(readyBound)})
	if err != nil {
		t.Fatal(err)
	}
	testbin.KillAtEnd(t, lc)
	if _, err := lc.WaitReady(testwait.Context(t, readyBound)); err != nil {
		t.Fatal(err)
	}
	var st struct{ Renew, Grace string }
	decodeJSON(t, "cluster status", mustCLI(t, append(baseEnv(), "LEASEHOLD_ENDPOINTS="+lc.Endpoints()[0]), "cluster", "status", "-o", "json"), &st)
	if st.Renew != "400ms" || st.Grace != "2s" {
		t.Fatalf("timings %+v, want renew 400ms, grace 2s", st)
	}
}
