package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// leaseholdBin is the binary under test, built once by TestMain; empty with
// -short.
var leaseholdBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		goleak.VerifyTestMain(m)
		return
	}
	dir, err := os.MkdirTemp("", "leasehold-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	if err := build(filepath.Join(dir, "leasehold")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	leaseholdBin = filepath.Join(dir, "leasehold")
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// build compiles cmd/leasehold with the go command on PATH. GOFLAGS and the
// rest of the environment pass through, so "GOFLAGS=-race go test" tests a
// race-enabled binary.
func build(out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to build leasehold: %w", err)
	}
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/leasehold/leasehold/cmd/leasehold")
	cmd.Env = os.Environ()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, b)
	}
	return nil
}
