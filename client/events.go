package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Events reads up to limit events with seq > afterSeq. With wait > 0 a
// caller that is caught up is answered when the next event is recorded or
// wait passes (a long poll); the call's deadline covers the wait.
func (c *Client) Events(ctx context.Context, afterSeq uint64, limit uint32, wait time.Duration, opts ...ReadOption) (*leaseholdv1.ListEventsResponse, error) {
	req := &leaseholdv1.ListEventsRequest{AfterSeq: afterSeq, Limit: limit, Consistency: consistency(opts)}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	return unary(ctx, c, callOpts{wait: max(wait, 0)}, req, eventSvc, eventsAPI.ListEvents)
}

// Watch streams events with seq > afterSeq to fn, batch by batch, in order.
// When the stream breaks it reconnects (following the leader, with backoff)
// from the last seq fn was given, so fn sees every event once. It returns
// when ctx ends (ctx's error), when fn returns an error (that error), on an
// answer a retry cannot fix (an *Error), or with ErrTruncated after fn got
// the batch that followed a gap: events were compacted away before the
// client could read them, and the caller must resync.
func (c *Client) Watch(ctx context.Context, afterSeq uint64, fn func([]*leaseholdv1.Event) error) error {
	if c.closed.Err() != nil {
		return ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.closed, cancel)
	defer stop()

	last := afterSeq
	redirects := 0
	for n := 0; ; {
		ep := c.target()
		var err error
		last, err = c.watchOnce(ctx, ep, last, fn, &n)
		if fnErr := (*watchFnError)(nil); errors.As(err, &fnErr) {
			return fnErr.err
		}
		if errors.Is(err, ErrTruncated) {
			return err
		}
		if c.closed.Err() != nil {
			return ErrClosed
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			e := toError(err)
			// A stream cut mid-message is reported by connect as INTERNAL
			// or UNKNOWN with no reason of ours ("incomplete envelope"):
			// a broken connection, and reading again from the last seq is
			// always safe. Any other refusal ends the watch as usual.
			cut := e.Reason == "" && (e.Code == connect.CodeInternal || e.Code == connect.CodeUnknown)
			if !cut && classify(e) == giveUp {
				return e
			}
			if c.steer(ctx, ep.addr, e, &redirects) {
				continue
			}
		}
		// A stream that ended cleanly is a node going away: reconnect too.
		if !c.sleep(ctx, n, 0) {
			return ctx.Err()
		}
		n++
	}
}

// watchFnError carries fn's error out of watchOnce, apart from the
// stream's own failures.
type watchFnError struct{ err error }

func (e *watchFnError) Error() string { return e.err.Error() }

// watchOnce runs one stream from ep and returns the last seq delivered. A
// message received resets the backoff count n: the node was working.
func (c *Client) watchOnce(ctx context.Context, ep *endpoints, last uint64,
	fn func([]*leaseholdv1.Event) error, n *int,
) (uint64, error) {
	req := connect.NewRequest(&leaseholdv1.WatchEventsRequest{AfterSeq: last})
	c.authorize(req.Header())
	stream, err := ep.events.WatchEvents(ctx, req)
	if err != nil {
		c.follow(ctx, errorHeader(err))
		return last, err
	}
	defer stream.Close()
	followed := false
	for stream.Receive() {
		if !followed {
			c.follow(ctx, stream.ResponseHeader())
			followed = true
		}
		*n = 0
		msg := stream.Msg()
		from := last
		if evs := msg.GetEvents(); len(evs) > 0 {
			if err := fn(evs); err != nil {
				return last, &watchFnError{err: err}
			}
			last = evs[len(evs)-1].GetSeq()
		}
		if msg.GetTruncated() {
			return last, fmt.Errorf("leasehold: watch: %w: events after seq %d were compacted away unread", ErrTruncated, from)
		}
	}
	err = stream.Err()
	c.follow(ctx, errorHeader(err))
	return last, err
}
