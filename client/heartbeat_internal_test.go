package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
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

// A beat that cannot be marshalled (a string that is not UTF-8) is refused
// by Send, before it is counted or queued: it would fail in the
// connection's send, after the request body began waiting for it.
func TestHeartbeatStreamRefusesBeatsThatDoNotMarshal(t *testing.T) {
	c, err := New(Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := c.HeartbeatStream(context.Background())
	defer s.Close()
	for field, send := range map[string]func() (uint64, error){
		"worker_id":     func() (uint64, error) { return s.Send("w\xff", nil) },
		"leases.job_id": func() (uint64, error) { return s.Send("w", []*leaseholdv1.LeaseRef{{JobId: "j\xc3", Token: 1}}) },
		"notes.note": func() (uint64, error) {
			return s.Send("w", nil, &leaseholdv1.ProgressNote{Token: 1, Note: "\xe2\x82"})
		},
	} {
		seq, err := send()
		var e *Error
		if seq != 0 || !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &e) || e.Field != field {
			t.Fatalf("%s not UTF-8: seq %d, %v; want ErrInvalidArgument naming %s", field, seq, err, field)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seq != 0 || len(s.queued) != 0 {
		t.Fatalf("refused beats were numbered (%d) or queued (%d)", s.seq, len(s.queued))
	}
}
