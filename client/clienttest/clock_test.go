package clienttest_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/client/clienttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestFakeClock(t *testing.T) {
	c := clienttest.NewFakeClock()
	start := c.Now()
	a := c.NewTimer(10 * time.Second)
	b := c.NewTimer(20 * time.Second)
	stopped := c.NewTimer(15 * time.Second)
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop: want true, then false")
	}
	if d := c.Deadlines(); len(d) != 2 || !d[0].Equal(start.Add(10*time.Second)) || !d[1].Equal(start.Add(20*time.Second)) {
		t.Fatalf("Deadlines %v", d)
	}

	if n := c.Advance(10*time.Second - time.Nanosecond); n != 0 {
		t.Fatalf("%d fired before any was due", n)
	}
	if n := c.Advance(time.Nanosecond); n != 1 {
		t.Fatalf("%d fired at the first deadline, want 1", n)
	}
	if at := <-a.C(); !at.Equal(start.Add(10 * time.Second)) {
		t.Fatalf("a fired at %v", at.Sub(start))
	}
	if a.Stop() {
		t.Fatal("Stop after firing returned true")
	}
	if n := c.Advance(time.Hour); n != 1 {
		t.Fatalf("%d fired, want b only", n)
	}
	<-b.C()
	select {
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}

	// A timer of zero or less fires at once, as a runtime timer does.
	select {
	case <-c.NewTimer(0).C():
	default:
		t.Fatal("a zero timer did not fire at once")
	}
}

func TestFakeClockWaitFor(t *testing.T) {
	c := clienttest.NewFakeClock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := c.Now().Add(time.Minute)
	done := make(chan error, 1)
	go func() { done <- c.WaitForTimerAt(ctx, want) }()
	c.NewTimer(time.Second)
	c.NewTimer(time.Minute)
	if err := <-done; err != nil {
		t.Fatalf("WaitForTimerAt: %v", err)
	}
	if err := c.BlockUntil(ctx, 2); err != nil {
		t.Fatalf("BlockUntil: %v", err)
	}
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	if err := c.BlockUntil(short, 3); err == nil {
		t.Fatal("BlockUntil with an ended context returned nil")
	}
}
