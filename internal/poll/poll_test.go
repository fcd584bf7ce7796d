package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	err := Until(context.Background(), func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Until: %v after %d calls, want nil after 3", err, calls)
	}
}

func TestUntilGivesUpWithTheLastComplaint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	calls := 0
	err := Until(ctx, func() error {
		calls++
		return errors.New("still not")
	})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still not") || calls < 2 {
		t.Fatalf("Until: %v after %d calls, want the deadline with the last complaint, after asking more than once", err, calls)
	}
}
