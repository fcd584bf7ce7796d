package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/localcluster"
)

// BinEnv names a prebuilt leasehold binary the tests run instead of
// building one.
const BinEnv = "LEASEHOLD_TEST_BIN"

var (
	once     sync.Once
	dir      string // where Leasehold built it; removed by Main
	bin      string
	buildErr error
)

// Leasehold is the leasehold binary under test: $LEASEHOLD_TEST_BIN when
// set, else cmd/leasehold built on the first call in this process. It is
// built like any `go build`: GOFLAGS and the rest of the environment pass
// through (GOFLAGS=-race gives a race-enabled server), but not the test's
// own -race. With -short it skips the test: nothing is built.
func Leasehold(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("tests of real processes do not run with -short")
	}
	once.Do(func() {
		if bin = os.Getenv(BinEnv); bin != "" {
			if _, buildErr = os.Stat(bin); buildErr == nil {
				bin, buildErr = filepath.Abs(bin)
			}
			return
		}
		if dir, buildErr = os.MkdirTemp("", "leasehold-test-bin-"); buildErr != nil {
			return
		}
		bin = filepath.Join(dir, "leasehold")
		buildErr = Build(bin, "", "github.com/leasehold/leasehold/cmd/leasehold")
	})
	if buildErr != nil {
		t.Fatalf("the leasehold binary: %v", buildErr)
	}
	return bin
}

// Build runs `go build -tags TAGS -o OUT PKG` (tags may be empty) with the
// go command on PATH.
func Build(out, tags, pkg string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to build %s: %w", pkg, err)
	}
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command(goBin, append(args, pkg)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, b)
	}
	return nil
}

// Main is a TestMain for packages that run the binary: the tests, then a
// check that no goroutine leaked, then the built binary removed.
func Main(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if dir != "" {
			os.RemoveAll(dir)
		}
		os.Exit(code)
	}))
}

// KillAtEnd kills the cluster's nodes when the test ends (SIGKILL: nothing
// is left to hand over to) and shows their logs if it failed.
func KillAtEnd(t testing.TB, lc *localcluster.Cluster) {
	t.Cleanup(func() {
		for i := range lc.NodeIDs() {
			if !lc.Exited(i) {
				lc.Kill(i)
			}
		}
		lc.Stop()
		if t.Failed() {
			t.Logf("node logs:\n%s", lc.Logs())
		}
	})
}
