package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// snapshot save and inspect print lines, not Go maps; restore prints the
// restore's own answer; removing a node that is no member fails.
func TestSnapshotAndRemoveCLI(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	c.cli(t, "job", "submit", "--id", "snap-1", "--payload", "x")
	file := filepath.Join(t.TempDir(), "backup.snap")
	for _, out := range []string{c.cli(t, "snapshot", "save", file), c.cli(t, "snapshot", "inspect", file)} {
		if strings.Contains(out, "map[") || !strings.Contains(out, "queued 1") || !strings.Contains(out, "last token") {
			t.Errorf("snapshot save/inspect:\n%s\nwant lines with queued 1 and no Go map", out)
		}
	}
	var restored struct {
		Restored  string `json:"restored"`
		LastToken uint64 `json:"last_token,string"`
	}
	decodeJSON(t, "snapshot restore", c.cli(t, "snapshot", "restore", file, "-o", "json"), &restored)
	var st struct {
		LastToken uint64 `json:"last_token,string"`
	}
	decodeJSON(t, "cluster status", c.cli(t, "cluster", "status", "-o", "json"), &st)
	// One node, nothing granted since: the restore's answer is the state.
	if restored.Restored != file || restored.LastToken == 0 || restored.LastToken != st.LastToken {
		t.Errorf("snapshot restore: %+v, status last token %d; want the restored floor", restored, st.LastToken)
	}
	if out := c.cli(t, "snapshot", "restore", file); !strings.HasPrefix(out, "restored "+file+"; the next token is above ") {
		t.Errorf("snapshot restore: %q", out)
	}

	r := runCLI(t, c.env(), "cluster", "remove", "node-9")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "leasehold: NOT_FOUND: ") || !strings.Contains(r.stderr, "node-9") || r.stdout != "" {
		t.Errorf("cluster remove node-9: exit %d, stdout %q, stderr %q; want exit 1 and NOT_FOUND", r.code, r.stdout, r.stderr)
	}
}
