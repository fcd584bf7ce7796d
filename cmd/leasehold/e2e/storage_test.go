package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbin"
)

// A server whose raft.db is lost after it had been a member refuses to
// start: one line on stderr naming the file, what is wrong and where the
// recovery procedure is, and a non-zero exit; never a panic.
func TestServerRefusesLostLog(t *testing.T) {
	t.Parallel()
	t.Run("boltdb", func(t *testing.T) {
		t.Parallel()
		refusesLostLog(t, "boltdb", []damage{
			{"raft.db", "truncated", func(path string) error { return os.Truncate(path, 1000) }, "raft.db: cannot be opened"},
			{"raft.db", "deleted", os.Remove, "raft.db: is missing, but"},
		})
	})
	t.Run("wal", func(t *testing.T) {
		t.Parallel()
		refusesLostLog(t, "wal", []damage{{"wal", "deleted", os.RemoveAll, "wal: is missing, but"}})
	})
}

type damage struct {
	file, name string
	do         func(path string) error
	want       string
}

func refusesLostLog(t *testing.T, store string, damages []damage) {
	dir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "leasehold.toml")
	if err := os.WriteFile(cfg, []byte(raftTimingsTOML+fmt.Sprintf("log_store = %q\n", store)), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", cfg, "--data-dir", dir, "--node-id", "lost1", "--bootstrap-expect", "1"}
	srv, api := testbin.StartServer(t, "server", 5*time.Second, args...)
	waitFor(t, readyBound, "the node to be ready", func() error {
		resp, err := http.Get("http://" + api + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	srv.Stop(exitBound)

	for _, damage := range damages {
		if err := damage.do(filepath.Join(dir, damage.file)); err != nil {
			t.Fatal(err)
		}
		p, _ := testbin.StartServer(t, "server", 0, args...)
		code := p.Wait(t, exitBound)
		stderr := strings.TrimSpace(p.Stderr())
		if code == 0 || strings.Contains(stderr, "\n") || !strings.HasPrefix(stderr, "leasehold: refusing to start: ") ||
			!strings.Contains(stderr, damage.want) || !strings.Contains(stderr, "docs/operations.md") {
			t.Fatalf("%s %s: exit %d, stderr %q", damage.file, damage.name, code, p.Stderr())
		}
	}
}
