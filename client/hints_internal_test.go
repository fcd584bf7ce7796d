package client

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/internal/h2ctest"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// membersNode answers Members from a list the test sets, and counts calls.
// With a gate, each call waits for the gate to close, after telling
// entered it arrived.
type membersNode struct {
	leaseholdv1connect.UnimplementedClusterServiceHandler
	addr string

	mu      sync.Mutex
	list    []string
	calls   int
	gate    chan struct{}
	entered chan struct{}
}

func newMembersNode(t *testing.T) *membersNode {
	t.Helper()
	n := &membersNode{entered: make(chan struct{}, 16)}
	mux := http.NewServeMux()
	mux.Handle(leaseholdv1connect.NewClusterServiceHandler(n))
	srv := h2ctest.Start(t, mux)
	n.addr = srv.Listener.Addr().String()
	n.list = []string{n.addr}
	return n
}

func (n *membersNode) set(list ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.list = list
}

func (n *membersNode) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls
}

func (n *membersNode) Members(ctx context.Context, _ *connect.Request[leaseholdv1.MembersRequest]) (*connect.Response[leaseholdv1.MembersResponse], error) {
	n.mu.Lock()
	n.calls++
	gate := n.gate
	resp := &leaseholdv1.MembersResponse{}
	for _, a := range n.list {
		resp.Members = append(resp.Members, &leaseholdv1.Member{ApiAddr: a})
	}
	n.mu.Unlock()
	if gate != nil {
		n.entered <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := connect.NewResponse(resp)
	// The answer names a leader too; a refresh must not follow it.
	out.Header().Set(transport.HeaderLeader, "10.0.0.99:7701")
	return out, nil
}

// stepClock is a time the test moves by hand.
type stepClock struct{ off atomic.Int64 }

var clockStart = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func (s *stepClock) now() time.Time          { return clockStart.Add(time.Duration(s.off.Load())) }
func (s *stepClock) advance(d time.Duration) { s.off.Add(int64(d)) }

func newHintClient(t *testing.T, clock *stepClock, endpoints ...string) *Client {
	t.Helper()
	c, err := New(Config{Endpoints: endpoints, CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.now = clock.now
	return c
}

const (
	member1 = "10.0.0.1:7701"
	member2 = "10.0.0.2:7701"
	outside = "10.6.6.6:7701"
)

// A hint to an unknown address reads the member list at most once per
// minMembersRefresh, counted from the end of the last read; known members
// and configured endpoints need no read.
func TestMembersRefreshIsRateLimited(t *testing.T) {
	node := newMembersNode(t)
	node.set(node.addr, member1)
	clock := &stepClock{}
	c := newHintClient(t, clock, node.addr)
	ctx := context.Background()

	if !c.admit(ctx, node.addr) || node.count() != 0 {
		t.Fatalf("the endpoint: %d reads, want admitted without one", node.count())
	}
	if c.admit(ctx, outside) || node.count() != 1 {
		t.Fatalf("outsider admitted, or %d reads: want refused after one", node.count())
	}
	if c.Leader() != node.addr {
		t.Fatalf("Leader() = %s: the Members answer's own header was followed", c.Leader())
	}
	if c.admit(ctx, outside) || !c.admit(ctx, member1) || node.count() != 1 {
		t.Fatalf("%d reads: want the outsider refused and member1 admitted from the first read", node.count())
	}
	if c.admit(ctx, "no-port") || c.admit(ctx, "http://"+member1) || node.count() != 1 {
		t.Fatalf("a malformed hint was admitted or read for (%d reads)", node.count())
	}

	node.set(node.addr, member1, member2)
	clock.advance(minMembersRefresh - time.Millisecond)
	if c.admit(ctx, member2) || node.count() != 1 {
		t.Fatalf("member2 within the limit: %d reads, want still 1 and refused", node.count())
	}
	clock.advance(time.Millisecond)
	if !c.admit(ctx, member2) || node.count() != 2 {
		t.Fatalf("member2 after the limit: %d reads, want 2 and admitted", node.count())
	}
}

// A refresh that finds the pinned member gone from the list moves the pin
// back to the endpoints, and the member cannot be pinned again.
func TestMembersRefreshDropsLeftMember(t *testing.T) {
	node := newMembersNode(t)
	node.set(node.addr, member1)
	clock := &stepClock{}
	c := newHintClient(t, clock, node.addr)
	ctx := context.Background()

	if !c.admit(ctx, member1) || !c.pin(member1) || c.Leader() != member1 {
		t.Fatalf("Leader() = %s, want %s", c.Leader(), member1)
	}
	node.set(node.addr)
	clock.advance(minMembersRefresh)
	if c.admit(ctx, outside) {
		t.Fatal("outsider admitted")
	}
	if c.Leader() != node.addr || c.pin(member1) || c.admit(ctx, member1) {
		t.Fatalf("Leader() = %s: want the pin back on %s and member1 refused", c.Leader(), node.addr)
	}
	c.mu.Lock()
	_, kept := c.stubs[member1]
	c.mu.Unlock()
	if kept {
		t.Fatal("the left member's clients are kept")
	}
}

// Callers that meet a refresh in flight wait for it rather than start
// their own, a caller whose context ends stops waiting, and the client's
// lock is not held during the read.
func TestMembersRefreshIsShared(t *testing.T) {
	node := newMembersNode(t)
	node.set(node.addr, member1)
	gate := make(chan struct{})
	node.gate = gate
	clock := &stepClock{}
	c := newHintClient(t, clock, node.addr)
	ctx := context.Background()

	first := make(chan bool, 1)
	go func() { first <- c.admit(ctx, outside) }()
	select {
	case <-node.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no Members call")
	}
	// The read is in flight: the lock is free, and a caller that gives up
	// is not held.
	if c.Leader() != node.addr || !c.pin(node.addr) {
		t.Fatal("the pin is unusable during a refresh")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if c.admit(done, member1) {
		t.Fatal("a caller whose context ended was admitted before the read ended")
	}

	const callers = 8
	var wg sync.WaitGroup
	results := make([]bool, callers)
	for i := range callers {
		wg.Go(func() {
			hint := outside
			if i%2 == 0 {
				hint = member1
			}
			results[i] = c.admit(ctx, hint)
		})
	}
	close(gate)
	wg.Wait()
	if <-first {
		t.Fatal("outsider admitted")
	}
	for i, ok := range results {
		if ok != (i%2 == 0) {
			t.Fatalf("caller %d admitted = %v", i, ok)
		}
	}
	if n := node.count(); n != 1 {
		t.Fatalf("%d Members calls, want the one in flight shared", n)
	}
}

// The list is read from the configured endpoints in turn, past one that
// is down.
func TestMembersRefreshTriesEachEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	node := newMembersNode(t)
	node.set(node.addr, member1)
	c := newHintClient(t, &stepClock{}, dead, node.addr)
	if !c.admit(context.Background(), member1) || node.count() != 1 {
		t.Fatalf("member1 not admitted after %d reads on the live endpoint", node.count())
	}
}
