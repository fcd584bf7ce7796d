//go:build unix

package proccpu

import (
	"crypto/sha256"
	"testing"
	"time"
)

// Work this process does shows in Self, which never goes back.
func TestSelfCountsThisProcess(t *testing.T) {
	start := Self()
	if start <= 0 {
		t.Fatalf("a running test process has used %v of CPU", start)
	}
	sum := sha256.Sum256(nil)
	for end := time.Now().Add(10 * time.Second); Self() <= start; {
		if time.Now().After(end) {
			t.Fatalf("10 s of hashing did not move the CPU time from %v", start)
		}
		for range 10000 {
			sum = sha256.Sum256(sum[:])
		}
	}
}
