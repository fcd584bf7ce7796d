package bench_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// leaseholdBin is the server the workloads run against, built once; empty
// with -short, when only the unit tests run.
var leaseholdBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		goleak.VerifyTestMain(m)
		return
	}
	dir, err := os.MkdirTemp("", "leasehold-bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	leaseholdBin = filepath.Join(dir, "leasehold")
	// The server is built without -race whatever the test binary is: the
	// bench's own code is what this package's race run checks.
	cmd := exec.Command("go", "build", "-o", leaseholdBin, "github.com/leasehold/leasehold/cmd/leasehold")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
