package bench

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// watcher streams the cluster's events from now on to fn, with the time
// each batch arrived, until stop. The stream follows the leader and
// resumes after failures by itself (client.Watch).
type watcher struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	err       error // why the stream ended, if not stop
	truncated bool  // events were compacted away unread: counts are incomplete
}

// watch starts streaming events recorded after the current last one.
func (e *env) watch(ctx context.Context, fn func(ev *pb.Event, arrived time.Time)) (*watcher, error) {
	cl := e.f.first()
	st, err := cl.Status(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		err := cl.Watch(ctx, st.GetLastEventSeq(), func(evs []*pb.Event) error {
			now := time.Now()
			for _, ev := range evs {
				fn(ev, now)
			}
			return nil
		})
		if ctx.Err() == nil {
			w.mu.Lock()
			w.err = err
			w.truncated = errors.Is(err, client.ErrTruncated)
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// stop ends the stream and returns its error, if it ended by itself.
func (w *watcher) stop() error {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *watcher) isTruncated() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.truncated
}
