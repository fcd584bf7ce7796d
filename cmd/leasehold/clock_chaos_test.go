//go:build chaos

package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A jump ahead of the chaos clock is a sleep the process did not see:
// the timers due within it fire at once, the others keep waiting.
func TestSkewClockJumpFiresTimersDueWithinIt(t *testing.T) {
	defer goleak.VerifyNone(t)
	path := filepath.Join(t.TempDir(), "clock")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("0 1")
	t.Setenv("LEASEHOLD_CHAOS_CLOCK", path)
	c := serverClock()
	before := c.Now()
	within := c.NewTimer(5 * time.Second)
	beyond := c.NewTimer(time.Hour)
	write("10 1")
	sk := c.(*skewClock)
	pending := func(tm any) bool {
		sk.mu.Lock()
		defer sk.mu.Unlock()
		_, ok := sk.timers[tm.(*skewTimer)]
		return ok
	}
	// The file is re-read on a reading, at most every 50 ms.
	for c.Now().Sub(before) < 10*time.Second {
		runtime.Gosched()
	}
	if pending(within) {
		t.Fatal("a timer due within the jump did not fire when the jump was seen")
	}
	if !pending(beyond) {
		t.Fatal("a timer due past the jump fired")
	}
	<-within.C()
	if within.Stop() {
		t.Fatal("Stop of a fired timer reported it stopped")
	}
	if !beyond.Stop() {
		t.Fatal("Stop of a pending timer reported it already fired")
	}
	// A jump back fires nothing.
	back := c.NewTimer(2 * time.Second)
	mark := c.Now()
	write("-10 1")
	for c.Now().Sub(mark) > 0 {
		runtime.Gosched()
	}
	if !pending(back) {
		t.Fatal("a jump back fired a timer")
	}
	back.Stop()
}
