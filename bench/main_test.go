package bench_test

import (
	"testing"

	"github.com/leasehold/leasehold/internal/testbin"
)

// The workloads run against the leasehold binary (testbin.Leasehold),
// built once; with -short only the unit tests run.
func TestMain(m *testing.M) { testbin.Main(m) }
