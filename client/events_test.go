package client_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

func events(seqs ...uint64) []*leaseholdv1.Event {
	out := make([]*leaseholdv1.Event, len(seqs))
	for i, s := range seqs {
		out[i] = &leaseholdv1.Event{Seq: s, Type: "job.submitted"}
	}
	return out
}

// A broken stream is reopened from the last event delivered, so fn sees
// every event once; fn's error ends Watch.
func TestWatchReconnectsFromLastSeq(t *testing.T) {
	node := newFakeNode(t)
	var mu sync.Mutex
	streams := 0
	node.setWatch(func(ctx context.Context, req *leaseholdv1.WatchEventsRequest, send func(*leaseholdv1.WatchEventsResponse) error) error {
		mu.Lock()
		streams++
		n := streams
		mu.Unlock()
		switch n {
		case 1:
			if err := send(&leaseholdv1.WatchEventsResponse{Events: events(1, 2)}); err != nil {
				return err
			}
			return connect.NewError(connect.CodeUnavailable, errors.New("node going away"))
		case 2:
			// Cut mid-stream: connect reports INTERNAL with no reason of
			// ours ("incomplete envelope"). Reconnect.
			if err := send(&leaseholdv1.WatchEventsResponse{Events: events(3)}); err != nil {
				return err
			}
			return connect.NewError(connect.CodeInternal, errors.New("protocol error: incomplete envelope"))
		case 3:
			// A clean end of stream: reconnect too.
			return nil
		default:
			if err := send(&leaseholdv1.WatchEventsResponse{Events: events(4, 5)}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}
	})
	c := newClient(t, node.addr)
	errStop := errors.New("seen enough")
	var seen []uint64
	err := c.Watch(testCtx(t), 0, func(evs []*leaseholdv1.Event) error {
		for _, e := range evs {
			seen = append(seen, e.GetSeq())
		}
		if len(seen) == 5 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("Watch: %v, want fn's error", err)
	}
	if !slices.Equal(seen, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("saw %v", seen)
	}
	var after []uint64
	for _, r := range node.requests("WatchEvents") {
		after = append(after, r.msg.(*leaseholdv1.WatchEventsRequest).GetAfterSeq())
	}
	if !slices.Equal(after, []uint64{0, 2, 3, 3}) {
		t.Fatalf("streams opened after seqs %v, want [0 2 3 3]", after)
	}
}

func TestWatchFollowsLeaderAndStopsOnRefusal(t *testing.T) {
	a, b := newFakeNode(t), newFakeNode(t)
	a.setMembers(a.addr, b.addr)
	a.setWatch(func(context.Context, *leaseholdv1.WatchEventsRequest, func(*leaseholdv1.WatchEventsResponse) error) error {
		return reasonErr(transport.ReasonNotLeader, &leaseholdv1.ErrorDetail{LeaderApi: b.addr})()
	})
	b.setWatch(func(context.Context, *leaseholdv1.WatchEventsRequest, func(*leaseholdv1.WatchEventsResponse) error) error {
		return reasonErr(transport.ReasonUnauthenticated, nil)()
	})
	c := newClient(t, a.addr)
	err := c.Watch(testCtx(t), 7, func([]*leaseholdv1.Event) error { return nil })
	if !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("Watch: %v, want unauthenticated from b", err)
	}
	if a.count("WatchEvents") != 1 || b.count("WatchEvents") != 1 || c.Leader() != b.addr {
		t.Fatalf("a=%d b=%d leader %s", a.count("WatchEvents"), b.count("WatchEvents"), c.Leader())
	}
}

// A gap in the stream is delivered, then reported as ErrTruncated.
func TestWatchTruncated(t *testing.T) {
	node := newFakeNode(t)
	node.setWatch(func(ctx context.Context, _ *leaseholdv1.WatchEventsRequest, send func(*leaseholdv1.WatchEventsResponse) error) error {
		if err := send(&leaseholdv1.WatchEventsResponse{Events: events(50, 51), Truncated: true}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	c := newClient(t, node.addr)
	var seen []uint64
	err := c.Watch(testCtx(t), 3, func(evs []*leaseholdv1.Event) error {
		for _, e := range evs {
			seen = append(seen, e.GetSeq())
		}
		return nil
	})
	if !errors.Is(err, client.ErrTruncated) || !slices.Equal(seen, []uint64{50, 51}) {
		t.Fatalf("Watch: %v after %v", err, seen)
	}
}

func TestWatchEndsWithContext(t *testing.T) {
	node := newFakeNode(t)
	opened := make(chan struct{}, 1)
	node.setWatch(func(ctx context.Context, _ *leaseholdv1.WatchEventsRequest, send func(*leaseholdv1.WatchEventsResponse) error) error {
		opened <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	c := newClient(t, node.addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() { errc <- c.Watch(ctx, 0, func([]*leaseholdv1.Event) error { return nil }) }()
	recv(t, "the stream to open", opened)
	cancel()
	if err := recv(t, "Watch to return", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch: %v", err)
	}
}

func TestEventsLongPoll(t *testing.T) {
	node := newFakeNode(t)
	node.on("ListEvents", func(_ context.Context, msg proto.Message, _ http.Header) (proto.Message, error) {
		req := msg.(*leaseholdv1.ListEventsRequest)
		return &leaseholdv1.ListEventsResponse{Events: events(req.GetAfterSeq() + 1), LastSeq: req.GetAfterSeq() + 1}, nil
	})
	c := newClient(t, node.addr)
	resp, err := c.Events(testCtx(t), 9, 100, 5*time.Second, client.Stale())
	if err != nil || resp.GetLastSeq() != 10 {
		t.Fatalf("Events: %v, %v", resp, err)
	}
	req := node.requests("ListEvents")[0].msg.(*leaseholdv1.ListEventsRequest)
	if req.GetLimit() != 100 || req.GetWait().AsDuration() != 5*time.Second || req.GetConsistency() != leaseholdv1.Consistency_CONSISTENCY_STALE {
		t.Fatalf("request %v", req)
	}
}

// A refusal that is not a cut stream ends the watch even without a reason
// of ours (a wrong port answering UNIMPLEMENTED), rather than reconnecting
// for ever.
func TestWatchStopsOnForeignRefusal(t *testing.T) {
	node := newFakeNode(t)
	node.setWatch(func(context.Context, *leaseholdv1.WatchEventsRequest, func(*leaseholdv1.WatchEventsResponse) error) error {
		return connect.NewError(connect.CodeUnimplemented, errors.New("no such service"))
	})
	c := newClient(t, node.addr)
	err := c.Watch(testCtx(t), 0, func([]*leaseholdv1.Event) error { return nil })
	var e *client.Error
	if !errors.As(err, &e) || e.Code != connect.CodeUnimplemented {
		t.Fatalf("Watch: %v, want UNIMPLEMENTED", err)
	}
	if n := node.count("WatchEvents"); n != 1 {
		t.Fatalf("%d streams opened, want 1", n)
	}
}
