package clocktest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The fake starts no goroutines; neither may the tests that use it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
