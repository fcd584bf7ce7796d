package poll

import (
	"context"
	"fmt"
	"time"
)

// Until calls cond until it returns nil, and returns nil then. When ctx
// ends first it returns ctx's error wrapped with cond's last complaint.
// The pause between calls starts at 5ms and doubles up to 100ms: a
// condition that holds soon is seen soon, one that takes seconds is not
// asked hundreds of times a second.
func Until(ctx context.Context, cond func() error) error {
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err := cond()
		if err == nil {
			return nil
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %v", ctx.Err(), err)
		}
	}
}
