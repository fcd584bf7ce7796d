package testwait

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
)

// ScaleEnv names a factor every bound is multiplied by instead of the one
// Scale works out (a number >= 1, say 4 on a loaded CI machine).
const ScaleEnv = "LEASEHOLD_TEST_SCALE"

// Scale is the factor bounds are multiplied by: $LEASEHOLD_TEST_SCALE
// when set, else 3 under the race detector (it slows the code 2 to 10
// times) and twice that with fewer than 4 CPUs.
func Scale() float64 {
	if f, err := strconv.ParseFloat(os.Getenv(ScaleEnv), 64); err == nil && f >= 1 {
		return f
	}
	f := 1.0
	if raceEnabled {
		f *= 3
	}
	if runtime.NumCPU() < 4 {
		f *= 2
	}
	return f
}

// Bound is d scaled to the machine.
func Bound(d time.Duration) time.Duration { return time.Duration(float64(d) * Scale()) }

// Context is a context that ends after bound scaled to the machine, or
// with the test.
func Context(t testing.TB, bound time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), Bound(bound))
	t.Cleanup(cancel)
	return ctx
}

// For polls cond until it returns nil, and fails the test with cond's last
// complaint once bound, scaled to the machine, has passed.
func For(t testing.TB, bound time.Duration, what string, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Bound(bound))
	defer cancel()
	if err := poll.Until(ctx, cond); err != nil {
		t.Fatalf("timed out after %s (%s scaled by %g) waiting for %s: %v", Bound(bound), bound, Scale(), what, err)
	}
}
