package client_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// answerBeat answers one beat of a stream as the harness answers a
// heartbeat.
func (h *workerHarness) answerBeat(ctx context.Context, s *beatServer, req *leaseholdv1.HeartbeatStreamRequest) error {
	resp, err := h.heartbeat(ctx, req.GetHeartbeat(), nil)
	if err != nil {
		return err
	}
	return s.Send(&leaseholdv1.HeartbeatStreamResponse{Seq: req.GetSeq(), Heartbeat: resp.(*leaseholdv1.HeartbeatResponse)})
}

// serveBeats answers every beat of a stream until it ends.
func (h *workerHarness) serveBeats(ctx context.Context, s *beatServer) error {
	for {
		req, err := s.Receive()
		if err != nil {
			return nil
		}
		if err := h.answerBeat(ctx, s, req); err != nil {
			return err
		}
	}
}

// selfStopAt reports whether the self-stop timer is armed at start+at.
func (h *workerHarness) selfStopAt(at time.Duration) bool {
	return slices.Contains(h.clock.Deadlines(), h.start.Add(at))
}

// The self-stop deadline counts from the send time of the last beat
// answered on the connection it was sent on. A beat left unanswered when
// the next is due makes the worker give the connection up; the next beat
// goes out on a new one; an answer there to the beat sent on the old one
// (a server echoing a seq it never got) moves nothing.
func TestWorkerStreamCreditsOnlyBeatsSentOnIt(t *testing.T) {
	h := newWorkerHarness(t)
	h.grants <- grant("j1", "k", 21, "")
	held := make(chan uint64, 1)
	h.node.setBeats(func(ctx context.Context, n int, s *beatServer) error {
		switch n {
		case 1: // answers the first beat, then goes silent
			for first := true; ; first = false {
				req, err := s.Receive()
				if err != nil {
					return nil
				}
				if first {
					if err := h.answerBeat(ctx, s, req); err != nil {
						return err
					}
					continue
				}
				held <- req.GetSeq()
				<-ctx.Done()
				return ctx.Err()
			}
		case 2: // answers the old connection's beat, then refuses
			req, err := s.Receive()
			if err != nil {
				return nil
			}
			stale := <-held
			if req.GetSeq() == stale {
				return errors.New("the beat sent on the old connection was sent again")
			}
			resp, _ := h.heartbeat(ctx, req.GetHeartbeat(), nil)
			if err := s.Send(&leaseholdv1.HeartbeatStreamResponse{Seq: stale, Heartbeat: resp.(*leaseholdv1.HeartbeatResponse)}); err != nil {
				return err
			}
			return reasonErr(transport.ReasonForbidden, nil)()
		}
		return h.serveBeats(ctx, s)
	})
	log := newCallLog()
	b := newBlockingHandler()
	w := h.run(client.WorkerOptions{Observer: log.observer(), Handlers: map[string]client.Handler{"k": b.handle}})
	recv(t, "the handler to start", b.started)

	h.waitTimerAt(renew)
	h.advanceTo(renew) // beat 1, answered
	h.waitTimerAt(renew + toleration - 2*renew)
	h.waitTimerAt(2 * renew)
	h.advanceTo(2 * renew) // beat 2, never answered on its connection
	held <- recv(t, "beat 2 to arrive", held)
	h.waitTimerAt(3 * renew)
	h.advanceTo(3 * renew) // beat 3, on a new connection
	waitFor(t, "three heartbeats to end", func() bool { return len(log.ended("Heartbeat")) == 3 })

	if acks := log.acked(); len(acks) != 2 || !acks[1].Equal(h.start.Add(renew)) {
		t.Fatalf("acknowledgements at %v, want registration and beat 1 (start+%v)", acks, renew)
	}
	for i, o := range log.ended("Heartbeat")[1:] {
		if o.err == nil {
			t.Fatalf("beat %d observed as answered: %v", i+2, o.resp)
		}
	}
	if !h.selfStopAt(renew+toleration-2*renew) || h.selfStopAt(2*renew+toleration-2*renew) {
		t.Fatalf("self-stop armed at %v: want start+%v, from beat 1's send", h.offsets(), renew+toleration-2*renew)
	}
	if n := h.node.count("HeartbeatStream"); n != 2 {
		t.Fatalf("%d streams, want the first and one reconnection", n)
	}

	// A third connection answers: the deadline moves with beat 4's send.
	h.waitTimerAt(4 * renew)
	h.advanceTo(4 * renew)
	h.waitTimerAt(4*renew + toleration - 2*renew)
	if err := h.stopDraining(w, client.DefaultDrainTimeout); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A beat whose connection fails before it is answered goes again on the
// next connection, and its answer counts from its first send, not from the
// retry: the worker's clock moved 3s while the first connection failed.
func TestWorkerStreamRetryKeepsTheSendTime(t *testing.T) {
	h := newWorkerHarness(t)
	h.node.setBeats(func(ctx context.Context, n int, s *beatServer) error {
		if n == 1 {
			if _, err := s.Receive(); err != nil {
				return nil
			}
			h.clock.Advance(3 * time.Second)
			return unavailable()
		}
		return h.serveBeats(ctx, s)
	})
	log := newCallLog()
	w := h.run(client.WorkerOptions{Observer: log.observer(), Handlers: map[string]client.Handler{"k": newBlockingHandler().handle}})
	h.waitTimerAt(renew)
	h.advanceTo(renew)
	h.waitTimerAt(renew + toleration - 2*renew)
	if acks := log.acked(); len(acks) != 2 || !acks[1].Equal(h.start.Add(renew)) {
		t.Fatalf("acknowledgements %v, want the beat's first send at start+%v", acks, renew)
	}
	if n := h.node.count("HeartbeatStream"); n != 2 {
		t.Fatalf("%d streams, want 2", n)
	}
	if n := len(log.ended("Heartbeat")); n != 1 {
		t.Fatalf("%d heartbeats observed, want the one beat, sent twice", n)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A cluster that does not serve the stream (UNIMPLEMENTED: an older server)
// gets unary heartbeats, the first at once, and the stream is not tried
// again.
func TestWorkerFallsBackToUnaryHeartbeats(t *testing.T) {
	h := newWorkerHarness(t)
	h.node.on("HeartbeatStream", func(context.Context, proto.Message, http.Header) (proto.Message, error) {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("no such method"))
	})
	h.grants <- grant("j1", "k", 31, "")
	b := newBlockingHandler()
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": b.handle}})
	recv(t, "the handler to start", b.started)
	for i := 1; i <= 3; i++ {
		at := time.Duration(i) * renew
		h.waitTimerAt(at)
		h.advanceTo(at)
		waitFor(t, "a unary heartbeat", func() bool { return len(h.heartbeats()) == i })
		h.waitTimerAt(at + toleration - 2*renew) // acknowledged from its send
	}
	if hb := h.heartbeats(); !slices.Equal(hb[2], []uint64{31}) {
		t.Fatalf("heartbeats %v", hb)
	}
	if n := h.node.count("HeartbeatStream"); n != 1 {
		t.Fatalf("%d stream attempts, want 1", n)
	}
	if err := h.stopDraining(w, client.DefaultDrainTimeout); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// streamGoroutines counts goroutines of heartbeat streams.
func streamGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "client.(*HeartbeatStream)") {
			n++
		}
	}
	return n
}

// The stream's goroutine ends before Run returns.
func TestWorkerStreamEndsWithRun(t *testing.T) {
	h := newWorkerHarness(t)
	w := h.run(client.WorkerOptions{Handlers: map[string]client.Handler{"k": newBlockingHandler().handle}})
	h.waitTimerAt(renew)
	h.advanceTo(renew)
	h.waitTimerAt(renew + toleration - 2*renew)
	if streamGoroutines() == 0 {
		t.Fatal("no stream goroutine while the worker runs: the check below proves nothing")
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := streamGoroutines(); n != 0 {
		t.Fatalf("%d heartbeat stream goroutines outlived Run", n)
	}
}

// A stream refused NOT_LEADER moves to the leader the answer names when
// the cluster lists it, with the token, and never to an address it does
// not.
func TestHeartbeatStreamFollowsLeader(t *testing.T) {
	a, b := newFakeNode(t), newFakeNode(t)
	capture := newCaptureServer(t)
	a.setMembers(a.addr, b.addr)
	leader := b.addr
	a.on("HeartbeatStream", func(context.Context, proto.Message, http.Header) (proto.Message, error) {
		return nil, reasonErr(transport.ReasonNotLeader, &leaseholdv1.ErrorDetail{LeaderId: "n2", LeaderApi: leader})()
	})
	c := newClientWith(t, client.Config{Endpoints: []string{a.addr}, Token: "s3cret"})
	s := c.HeartbeatStream(testCtx(t))
	defer s.Close()
	seq, err := s.Send("w1", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := recv(t, "the answer", s.Results())
	if r.Seq != seq || r.Err != nil || r.Response == nil {
		t.Fatalf("result %+v, want beat %d answered", r, seq)
	}
	if c.Leader() != b.addr || a.count("HeartbeatStream") != 1 || b.count("Heartbeat") != 1 {
		t.Fatalf("pinned to %s after a=%d streams, b=%d beats", c.Leader(), a.count("HeartbeatStream"), b.count("Heartbeat"))
	}
	if got := b.requests("HeartbeatStream")[0].header.Get("Authorization"); got != "Bearer s3cret" {
		t.Fatalf("Authorization at the leader %q", got)
	}

	// A hint to an address the cluster does not list is not followed: the
	// beat is tried again where the client may go.
	c2 := newClientWith(t, client.Config{Endpoints: []string{a.addr}, Token: "s3cret"})
	leader = capture.addr
	s2 := c2.HeartbeatStream(testCtx(t))
	if _, err := s2.Send("w1", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stream to be tried again", func() bool { return a.count("HeartbeatStream") >= 4 })
	s2.Close()
	if got := capture.requests(); len(got) != 0 {
		t.Fatalf("the outsider got %d requests", len(got))
	}
	if _, err := s2.Send("w1", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send after Close: %v", err)
	}
}

// An answer is matched to a beat sent on the same connection: a server
// that answers, on a new connection, a beat sent on the old one gets that
// answer ignored; the beat has already failed with its connection.
func TestHeartbeatStreamMatchesAnswersPerConnection(t *testing.T) {
	n := newFakeNode(t)
	held := make(chan uint64, 1)
	n.setBeats(func(ctx context.Context, count int, s *beatServer) error {
		req, err := s.Receive()
		if err != nil {
			return nil
		}
		if count == 1 {
			held <- req.GetSeq()
			<-ctx.Done()
			return ctx.Err()
		}
		for _, seq := range []uint64{<-held, req.GetSeq()} {
			if err := s.Send(&leaseholdv1.HeartbeatStreamResponse{Seq: seq, Heartbeat: &leaseholdv1.HeartbeatResponse{}}); err != nil {
				return err
			}
		}
		<-ctx.Done()
		return nil
	})
	c := newClient(t, n.addr)
	s := c.HeartbeatStream(testCtx(t))
	defer s.Close()
	first, _ := s.Send("w1", nil)
	old := recv(t, "the first beat to arrive", held)
	held <- old
	s.Reset()
	second, _ := s.Send("w1", nil)
	var got []client.HeartbeatResult
	for len(got) == 0 || got[len(got)-1].Seq != second {
		got = append(got, recv(t, "a result", s.Results()))
	}
	// The stale answer came before beat 2's on the wire, so it would be
	// among these.
	if len(got) != 2 || got[0].Seq != first || got[0].Err == nil || got[1].Err != nil {
		t.Fatalf("results %+v: want beat %d failed with its connection, then beat %d answered", got, first, second)
	}
}
