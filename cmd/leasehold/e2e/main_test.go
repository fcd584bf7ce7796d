package e2e

import (
	"testing"

	"github.com/leasehold/leasehold/internal/testbin"
)

// The binary under test is testbin.Leasehold's: built once, on first use;
// nothing is built with -short.
func TestMain(m *testing.M) { testbin.Main(m) }
