package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
)

// acceptor is what an accept loop needs of the server it accepts for (the
// Mux and the RPCServer).
type acceptor interface {
	// isClosed reports that the server's Close has begun.
	isClosed() bool
	// track admits conn and counts the goroutine that will serve it; false
	// once the server is closed.
	track(conn net.Conn) bool
}

// acceptLoop accepts on ln until srv closes, serving each conn srv admits
// in a goroutine of its own. It returns nil after srv's Close, and an error
// naming the listener if ln was closed by anyone else. Other Accept errors
// (probably out of file descriptors) are retried with a backoff rather
// than spun on; ctx ends the backoff.
func acceptLoop(ctx context.Context, ln net.Listener, srv acceptor, logger hclog.Logger, name string, serve func(net.Conn)) error {
	var delay time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if srv.isClosed() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("transport: %s listener: %w", name, err)
			}
			delay = nextAcceptDelay(delay)
			logger.Warn("accept failed", "error", err, "retry_in", delay)
			if !waitOrDone(ctx, delay) {
				return nil
			}
			continue
		}
		delay = 0
		if !srv.track(conn) {
			conn.Close()
			return nil
		}
		go serve(conn)
	}
}

func nextAcceptDelay(d time.Duration) time.Duration {
	const lo, hi = 5 * time.Millisecond, time.Second
	if d == 0 {
		return lo
	}
	return min(2*d, hi)
}

// waitOrDone waits for d and reports false if ctx ended first.
func waitOrDone(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
