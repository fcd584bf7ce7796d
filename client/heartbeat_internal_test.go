package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
)

// A heartbeat cut off by the next one logs why it had no answer: the last
// attempt's error, not the cancellation that ended it.
func TestAbandonedBeatKeepsTheRealError(t *testing.T) {
	refused := &Error{Message: "connection refused"}
	err := abandoned(ctxError(canceledCtx(), refused))
	if !errors.Is(err, refused) {
		t.Fatalf("abandoned(retry error) = %v, does not wrap the last attempt's error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "connection refused") || strings.Contains(msg, "context canceled") {
		t.Errorf("message %q: want the last attempt's error, without the cancellation", msg)
	}
	if msg := abandoned(context.Canceled).Error(); msg != "no answer before the next heartbeat was due" {
		t.Errorf("abandoned(no attempt finished) = %q", msg)
	}
	if err := abandoned(refused); !errors.Is(err, refused) {
		t.Errorf("abandoned(plain error) = %v, does not wrap it", err)
	}
}

func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// Readings of the suspend-aware clock count from boot; logs show them as
// the wall time they stand for.
func TestWallTimeOfAClockReading(t *testing.T) {
	now := clock.System().Now()
	got, err := time.Parse(time.RFC3339Nano, wallTime(now.Add(-5*time.Second), now))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(got) - 5*time.Second; d < -time.Second || d > time.Second {
		t.Errorf("wall time of a reading 5s ago is %v, %v from 5s ago", got, d)
	}
}
