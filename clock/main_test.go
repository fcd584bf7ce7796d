package clock_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The system clock's timers start goroutines on Linux; every one must end
// when its timer fires or stops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
