package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/h2ctest"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// captureServer stands for a host an attacker controls: it records every
// request that reaches it and answers 503, so a client that was lured
// there goes back to its endpoints and the test runs to its assertions.
type captureServer struct {
	addr string

	mu  sync.Mutex
	got []captured
}

type captured struct {
	method, path string
	auth         bool // an Authorization header came with it
}

func newCaptureServer(t *testing.T) *captureServer {
	t.Helper()
	s := &captureServer{}
	srv := h2ctest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.got = append(s.got, captured{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization") != ""})
		s.mu.Unlock()
		http.Error(w, "captured", http.StatusServiceUnavailable)
	}))
	s.addr = srv.Listener.Addr().String()
	return s
}

func (s *captureServer) requests() []captured {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]captured(nil), s.got...)
}

// untouched checks the end of an attack: the capture server got nothing,
// the client is still on the node, and the client read the member list with
// its token, but not once per bad hint (at most once a second).
func untouched(t *testing.T, c *client.Client, node *fakeNode, capture *captureServer, start time.Time) {
	t.Helper()
	if got := capture.requests(); len(got) != 0 {
		t.Fatalf("the capture server got %d requests, the first %+v", len(got), got[0])
	}
	if c.Leader() != node.addr {
		t.Fatalf("Leader() = %s, want the node %s", c.Leader(), node.addr)
	}
	ms := node.requests("Members")
	if len(ms) == 0 {
		t.Fatal("the client never asked the cluster whether the hint is a member")
	}
	for _, r := range ms {
		if got := r.header.Get("Authorization"); got != "Bearer s3cret" {
			t.Fatalf("Members asked with Authorization %q", got)
		}
	}
	if limit := 1 + int(time.Since(start)/time.Second); len(ms) > limit {
		t.Fatalf("%d Members calls in %v: want at most one a second", len(ms), time.Since(start))
	}
}

// A node naming an outsider as leader, in NOT_LEADER details and in the
// header of every answer, cannot make the client send the outsider
// anything: it is neither configured nor listed by the cluster.
func TestHintToOutsiderIsIgnored(t *testing.T) {
	start := time.Now()
	capture := newCaptureServer(t)
	node := newFakeNode(t)
	node.setMembers(node.addr)
	node.setLeader(capture.addr)
	notLeader := reasonErr(transport.ReasonNotLeader, &leaseholdv1.ErrorDetail{LeaderId: "n9", LeaderApi: capture.addr})
	node.script("GetJob", &leaseholdv1.GetJobResponse{Job: &leaseholdv1.Job{Seq: 7}}, notLeader, notLeader)
	c := newClientWith(t, client.Config{Endpoints: []string{node.addr}, Token: "s3cret"})
	ctx := testCtx(t)

	for range 5 {
		job, err := c.Job(ctx, "j1")
		if err != nil || job.GetSeq() != 7 {
			t.Fatalf("Job = %v, %v: want seq 7 from the node", job, err)
		}
		if c.Leader() == capture.addr {
			t.Fatal("Leader() is the capture server")
		}
	}
	// A node that only ever redirects to the outsider: the call is retried
	// on the node until its context ends, and says why.
	cctx, cancel := context.WithCancel(ctx)
	node.on("GetJob", cancelOnCall(4, cancel, notLeader))
	if _, err := c.Job(cctx, "j2"); !errors.Is(err, context.Canceled) || !errors.Is(err, client.ErrNotLeader) {
		t.Fatalf("Job: %v, want the context's end and NOT_LEADER", err)
	}
	// Status is one attempt on the pinned node; its header is a hint too.
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("Status: %v", err)
	}
	untouched(t, c, node, capture, start)
}

// The same through a watch: a NOT_LEADER when the stream opens and the
// header of the stream that follows.
func TestWatchIgnoresOutsiderHint(t *testing.T) {
	start := time.Now()
	capture := newCaptureServer(t)
	node := newFakeNode(t)
	node.setMembers(node.addr)
	node.setLeader(capture.addr)
	var mu sync.Mutex
	streams := 0
	node.setWatch(func(ctx context.Context, _ *leaseholdv1.WatchEventsRequest, send func(*leaseholdv1.WatchEventsResponse) error) error {
		mu.Lock()
		streams++
		first := streams == 1
		mu.Unlock()
		if first {
			err := reasonErr(transport.ReasonNotLeader, &leaseholdv1.ErrorDetail{LeaderApi: capture.addr})()
			var cerr *connect.Error
			if errors.As(err, &cerr) {
				cerr.Meta().Set(transport.HeaderLeader, capture.addr)
			}
			return err
		}
		if err := send(&leaseholdv1.WatchEventsResponse{Events: events(1, 2, 3)}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	c := newClientWith(t, client.Config{Endpoints: []string{node.addr}, Token: "s3cret"})
	errStop := errors.New("stop")
	var seen int
	err := c.Watch(testCtx(t), 0, func(evs []*leaseholdv1.Event) error {
		seen += len(evs)
		return errStop
	})
	if !errors.Is(err, errStop) || seen != 3 {
		t.Fatalf("Watch: %v after %d events, want fn's error after 3", err, seen)
	}
	untouched(t, c, node, capture, start)
}

// The same through a snapshot: a refusal naming the outsider in its
// header, then a snapshot whose answer names it too.
func TestSnapshotIgnoresOutsiderHint(t *testing.T) {
	start := time.Now()
	capture := newCaptureServer(t)
	node := newFakeNode(t)
	node.setMembers(node.addr)
	var mu sync.Mutex
	refused := false
	node.setSnapshot(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		first := !refused
		refused = true
		mu.Unlock()
		if first {
			refuse(http.StatusServiceUnavailable, transport.ReasonNotLeader, capture.addr)(w, r)
			return
		}
		w.Header().Set(transport.HeaderLeader, capture.addr)
		_, _ = io.WriteString(w, "snapshot-bytes")
	})
	c := newClientWith(t, client.Config{Endpoints: []string{node.addr}, Token: "s3cret"})
	var buf bytes.Buffer
	if err := c.SaveSnapshot(testCtx(t), &buf); err != nil || buf.String() != "snapshot-bytes" {
		t.Fatalf("SaveSnapshot: %v, saved %q", err, buf.String())
	}
	untouched(t, c, node, capture, start)
}

// The worker runtime uses the same client, so the rule holds for every
// call it makes: register, acquire, report, heartbeat.
func TestWorkerIgnoresOutsiderHint(t *testing.T) {
	start := time.Now()
	capture := newCaptureServer(t)
	h := newWorkerHarness(t)
	h.client = newClientWith(t, client.Config{Endpoints: []string{h.node.addr}, Token: "s3cret"})
	h.node.setMembers(h.node.addr)
	h.node.setLeader(capture.addr)
	h.grants <- grant("j1", "echo", 11, "p1")
	w := h.run(client.WorkerOptions{
		Handlers: map[string]client.Handler{"echo": func(context.Context, *client.Job) (client.Result, error) {
			return client.Result{}, nil
		}},
	})
	waitFor(t, "the report", func() bool { return len(h.reports()) == 1 })
	h.waitTimerAt(renew)
	h.advanceTo(renew)
	waitFor(t, "a heartbeat", func() bool { return len(h.heartbeats()) >= 1 })
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	untouched(t, h.client, h.node, capture, start)
}

// A hint to a node outside Endpoints that the cluster lists is followed;
// a pin there still rotates back to the endpoints when the node fails.
func TestHintToListedMemberIsFollowed(t *testing.T) {
	a, b := newFakeNode(t), newFakeNode(t)
	a.setMembers(a.addr, b.addr)
	a.on("GetJob", func(context.Context, proto.Message, http.Header) (proto.Message, error) {
		return nil, reasonErr(transport.ReasonNotLeader, &leaseholdv1.ErrorDetail{LeaderId: "n2", LeaderApi: b.addr})()
	})
	c := newClientWith(t, client.Config{Endpoints: []string{a.addr}, Token: "s3cret"})
	ctx := testCtx(t)

	if _, err := c.Job(ctx, "j1"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if c.Leader() != b.addr || a.count("GetJob") != 1 || b.count("GetJob") != 1 {
		t.Fatalf("Leader() = %s after a=%d b=%d calls: want the hint to %s followed", c.Leader(), a.count("GetJob"), b.count("GetJob"), b.addr)
	}
	ms := a.requests("Members")
	if len(ms) != 1 || ms[0].header.Get("Authorization") != "Bearer s3cret" {
		t.Fatalf("%d Members calls: want one, with the token", len(ms))
	}
	if got := b.requests("GetJob")[0].header.Get("Authorization"); got != "Bearer s3cret" {
		t.Fatalf("Authorization at the member %q", got)
	}
	// A known member needs no second look.
	if _, err := c.Job(ctx, "j2"); err != nil {
		t.Fatalf("Job: %v", err)
	}
	if b.count("GetJob") != 2 || a.count("Members") != 1 {
		t.Fatalf("b=%d calls, %d Members calls: want the second call straight to b", b.count("GetJob"), a.count("Members"))
	}

	// b goes away: the pin rotates back to a, which is the leader now.
	b.srv.Close()
	a.script("GetJob", &leaseholdv1.GetJobResponse{Job: &leaseholdv1.Job{Seq: 3}})
	job, err := c.Job(ctx, "j3")
	if err != nil || job.GetSeq() != 3 {
		t.Fatalf("Job = %v, %v: want seq 3 from a", job, err)
	}
	if c.Leader() != a.addr {
		t.Fatalf("Leader() = %s, want %s after the member failed", c.Leader(), a.addr)
	}
}
