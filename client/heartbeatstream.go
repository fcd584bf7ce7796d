package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// HeartbeatStream sends heartbeats over a bidirectional stream to the
// leader (WorkerService.HeartbeatStream), one connection at a time: it
// connects when a beat waits to be sent, and when a connection ends it
// connects again with the client's backoff, following the leader hint as
// any call does (only to a configured endpoint or a member). It is meant
// for one worker: a beat superseded by a newer one is not sent again.
// Several workers of one process may share a stream, since each beat names
// its worker; beats Sent at the same time then leave in one frame and are
// answered together. But the stream treats their beats as one worker's:
// while it has no connection (the first dial too) and when a connection
// ends, only its newest beat goes (again), the others failing with
// ErrSuperseded or the connection's error, so their workers must send
// again; and one worker's refused beat ends the connection for all.
//
// Every beat Send accepts gets exactly one result on Results, with its
// sequence number: the server's answer, or why it failed. A beat is
// answered only on the connection it was sent on: when a connection ends,
// its unanswered beats fail, except the newest beat of the stream, which
// goes again on the next connection if the failure is one a retry may fix
// (the node was not the leader, or went away). So an answer always comes
// from a stream the beat was sent on, and a send time read before Send is
// never later than the send the answer acknowledges.
//
// Send never waits for an answer or a connection. Results must be read:
// the stream stops reading answers while its results are not taken. Close
// ends the stream and waits for its goroutine; Results is closed then, and
// beats without a result by then get none.
type HeartbeatStream struct {
	c       *Client
	ctx     context.Context
	cancel  context.CancelFunc
	stop    func() bool // stops closing ctx with the client
	results chan HeartbeatResult
	wake    chan struct{} // a beat waits for a connection
	done    chan struct{} // run returned

	mu     sync.Mutex
	seq    uint64
	conn   *beatConn    // the open connection; nil while there is none
	queued []queuedBeat // waiting for a connection
}

// HeartbeatResult is the fate of one beat of a HeartbeatStream.
type HeartbeatResult struct {
	Seq uint64
	// Response is the server's answer, as Heartbeat's; nil with Err.
	Response *leaseholdv1.HeartbeatResponse
	// Err is why the beat failed: an *Error (the server's refusal, the
	// connection's end), or ErrSuperseded.
	Err error
}

// ErrSuperseded: a heartbeat stream's beat lost its connection while a
// newer beat was already sent; only the newest is sent again.
var ErrSuperseded = errors.New("heartbeat superseded by a newer one")

type queuedBeat struct {
	seq uint64
	req *leaseholdv1.HeartbeatStreamRequest
}

type beatStream = connect.BidiStreamForClient[leaseholdv1.HeartbeatStreamRequest, leaseholdv1.HeartbeatStreamResponse]

// beatConn is one connection of a stream.
type beatConn struct {
	stream *beatStream
	cancel context.CancelFunc
	sendMu sync.Mutex
	// pending are the beats sent on it and not answered; endErr, when set,
	// is why the stream gave the connection up (Reset). Both under the
	// stream's mu.
	pending []queuedBeat
	endErr  error
	// announced counts the beats handed to send and not yet read off the
	// request body whole, so beats sent together leave in one frame
	// (withAnnounced).
	announced atomic.Int64
}

// HeartbeatStream returns a heartbeat stream of the cluster, connected on
// the first Send. It ends with ctx, Close, or the Client's Close.
func (c *Client) HeartbeatStream(ctx context.Context) *HeartbeatStream {
	s := &HeartbeatStream{c: c, results: make(chan HeartbeatResult, 16), wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.stop = context.AfterFunc(c.closed, s.cancel)
	go s.run()
	return s
}

// Send sends a heartbeat of workerID naming leases, with progress notes
// for some of them (see Client.Heartbeat), or queues it for the next
// connection, and returns its sequence number. It fails only once the
// stream has ended, or for a beat that cannot be marshalled (a string
// that is not UTF-8: ErrInvalidArgument, nothing sent).
func (s *HeartbeatStream) Send(workerID string, leases []*leaseholdv1.LeaseRef, notes ...*leaseholdv1.ProgressNote) (uint64, error) {
	if err := marshalable(workerID, leases, notes); err != nil {
		return 0, err
	}
	req := &leaseholdv1.HeartbeatStreamRequest{Heartbeat: &leaseholdv1.HeartbeatRequest{WorkerId: workerID, Leases: leases, Notes: notes}}
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		if s.c.closed.Err() != nil {
			return 0, ErrClosed
		}
		return 0, s.ctx.Err()
	}
	s.seq++
	req.Seq = s.seq
	bc := s.conn
	if bc == nil {
		s.queued = append(s.queued, queuedBeat{s.seq, req})
		s.mu.Unlock()
		signal(s.wake)
		return req.Seq, nil
	}
	bc.pending = append(bc.pending, queuedBeat{s.seq, req})
	s.mu.Unlock()
	bc.send(req)
	return req.Seq, nil
}

// marshalable refuses a beat that cannot be marshalled: protobuf strings
// must be UTF-8. Such a beat would fail in the connection's send after it
// was announced, and the request body, already reading toward it, would
// hold the beats read before it until another came (frames.go).
func marshalable(workerID string, leases []*leaseholdv1.LeaseRef, notes []*leaseholdv1.ProgressNote) error {
	bad := func(field string) error {
		return &Error{Reason: transport.ReasonInvalidArgument, Code: connect.CodeInvalidArgument, Field: field,
			Message: "heartbeat: " + field + " is not valid UTF-8"}
	}
	if !utf8.ValidString(workerID) {
		return bad("worker_id")
	}
	for _, l := range leases {
		if !utf8.ValidString(l.GetJobId()) {
			return bad("leases.job_id")
		}
	}
	for _, n := range notes {
		if !utf8.ValidString(n.GetNote()) {
			return bad("notes.note")
		}
	}
	return nil
}

// Results delivers one result per beat sent, in the order they are known.
func (s *HeartbeatStream) Results() <-chan HeartbeatResult { return s.results }

// Reset gives up on the current connection, as on a node that stopped
// answering: its unanswered beats fail (the newest goes again), and the
// stream reconnects to the next endpoint after a backoff.
func (s *HeartbeatStream) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if bc := s.conn; bc != nil {
		// Beats sent from now on wait for the next connection.
		s.conn = nil
		bc.endErr = &Error{Code: connect.CodeDeadlineExceeded, Message: "heartbeat stream: a beat went unanswered; giving the node up"}
		bc.cancel()
	}
}

// Close ends the stream and waits for its goroutine to return.
func (s *HeartbeatStream) Close() {
	s.cancel()
	s.stop()
	<-s.done
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// send writes one beat; a failure shows as the connection's end, which
// run reads from the stream.
func (bc *beatConn) send(req *leaseholdv1.HeartbeatStreamRequest) {
	bc.announced.Add(1)
	bc.sendMu.Lock()
	defer bc.sendMu.Unlock()
	if err := bc.stream.Send(req); err != nil {
		// Not read whole: the connection is ending (Send checked that
		// the beat marshals), and its body must not wait for this beat.
		// An extra decrement only ends a read one message sooner.
		bc.announced.Add(-1)
	}
}

// run connects while beats wait, and delivers every result.
func (s *HeartbeatStream) run() {
	defer close(s.done)
	defer close(s.results)
	fails, redirects := 0, 0
	pause := false // back off before the next connection
	var floor time.Duration
	var tried uint64 // the newest beat when the last connection began
	for {
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			return
		}
		newest, queued := s.newest()
		if !queued {
			continue
		}
		if newest != tried {
			// A new beat starts its retries afresh, as a new call would.
			fails, pause, tried = 0, false, newest
		}
		if pause {
			if !s.backOff(fails-1, floor, tried) {
				return
			}
			if newest, _ = s.newest(); newest != tried {
				fails, tried = 0, newest
			}
		}
		ep := s.c.target()
		acked, err := s.connection(ep)
		if s.ctx.Err() != nil {
			return
		}
		if acked {
			fails, redirects = 0, 0
		}
		e := toError(err)
		floor = e.RetryAfter
		switch {
		case beatVerdict(e, acked) == giveUp:
			// The answer was about a beat, not the node: the beats failed
			// with it, and the next one connects at once.
			fails, pause = 0, false
		case s.c.steer(s.ctx, ep.addr, e, &redirects):
			pause = false // to the leader at once, as call does
		default:
			fails, pause = fails+1, true
		}
		signal(s.wake) // a beat may have been queued again
	}
}

// backOff waits for the n-th backoff, and at least floor, or until a beat
// newer than tried is sent (it starts its retries afresh, as a new call
// would); false when the stream ended.
func (s *HeartbeatStream) backOff(n int, floor time.Duration, tried uint64) bool {
	t := time.NewTimer(max(s.c.backoff(n), floor))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-s.wake:
			if newest, _ := s.newest(); newest != tried {
				return true
			}
		case <-s.ctx.Done():
			return false
		}
	}
}

// newest is the stream's newest beat, and whether beats wait for a
// connection.
func (s *HeartbeatStream) newest() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq, len(s.queued) > 0
}

// beatVerdict is classify for a connection's end: a stream cut mid-message
// (INTERNAL or UNKNOWN without a reason of ours, "incomplete envelope")
// after it answered is a broken connection, as for Watch; a stream that
// ended without an error (a node going away) is worth another connection.
func beatVerdict(e *Error, acked bool) verdict {
	if e.Reason == "" && acked && (e.Code == connect.CodeInternal || e.Code == connect.CodeUnknown) {
		return backOff
	}
	return classify(e)
}

// connection runs one connection to ep: it sends the newest queued beat
// (older ones are superseded), then every beat Send hands it, and delivers
// answers until the connection ends. acked says whether it answered a beat.
func (s *HeartbeatStream) connection(ep *endpoints) (acked bool, err error) {
	cctx, cancel := context.WithCancel(s.ctx)
	bc := &beatConn{cancel: cancel}
	bc.stream = ep.workers.HeartbeatStream(withAnnounced(cctx, &bc.announced))
	// Cancelling the request does not wake a read of the answers while the
	// request body is open (HTTP/2's transport watches the context only
	// once the body has ended): closing both sides does.
	closed := make(chan struct{})
	context.AfterFunc(cctx, func() {
		defer close(closed)
		bc.stream.CloseRequest()
		bc.stream.CloseResponse()
	})
	defer func() {
		cancel()
		<-closed
	}()
	s.c.authorize(bc.stream.RequestHeader())
	// The first send may wait for the dial: beats sent meanwhile queue, and
	// only the newest of them follows. The connection is Send's once the
	// queue is empty.
	for {
		s.mu.Lock()
		n := len(s.queued)
		if n == 0 {
			s.conn = bc
			s.mu.Unlock()
			break
		}
		stale := slices.Clone(s.queued[:n-1])
		newest := s.queued[n-1]
		s.queued = s.queued[:0]
		bc.pending = append(bc.pending, newest)
		s.mu.Unlock()
		for _, b := range stale {
			if !s.deliver(HeartbeatResult{Seq: b.seq, Err: ErrSuperseded}) {
				return false, s.ctx.Err()
			}
		}
		bc.send(newest.req)
	}

	followed := false
	for {
		msg, err := bc.stream.Receive()
		if !followed {
			hdr := errorHeader(err)
			if err == nil {
				hdr = bc.stream.ResponseHeader()
			}
			s.c.follow(s.ctx, hdr)
			followed = true
		}
		if err != nil {
			return acked, s.detach(bc, err, acked)
		}
		if s.answered(bc, msg.GetSeq()) {
			acked = true
			if !s.deliver(HeartbeatResult{Seq: msg.GetSeq(), Response: msg.GetHeartbeat()}) {
				return acked, s.ctx.Err()
			}
		}
	}
}

// answered takes seq off the connection's pending beats; false when it was
// not sent there (an answer to nothing is ignored).
func (s *HeartbeatStream) answered(bc *beatConn, seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(bc.pending, func(b queuedBeat) bool { return b.seq == seq })
	if i < 0 {
		return false
	}
	if i == 0 {
		// Answers mostly come in order: the oldest goes without moving
		// the rest (a stream carrying many workers has thousands pending).
		bc.pending[0] = queuedBeat{}
		bc.pending = bc.pending[1:]
	} else {
		bc.pending = slices.Delete(bc.pending, i, i+1)
	}
	return true
}

// detach ends a connection: its unanswered beats fail with why it ended,
// except the stream's newest beat, queued again when a retry may fix the
// failure. It returns why the connection ended.
func (s *HeartbeatStream) detach(bc *beatConn, err error, acked bool) error {
	s.mu.Lock()
	if s.conn == bc {
		s.conn = nil
	}
	if bc.endErr != nil {
		err = bc.endErr
	}
	e := toError(err)
	retry := beatVerdict(e, acked) != giveUp
	var failed []queuedBeat
	for _, b := range bc.pending {
		if retry && b.seq == s.seq {
			s.queued = append(s.queued, b)
		} else {
			failed = append(failed, b)
		}
	}
	bc.pending = nil
	s.mu.Unlock()
	for _, b := range failed {
		if !s.deliver(HeartbeatResult{Seq: b.seq, Err: e}) {
			break
		}
	}
	return err
}

// deliver hands a result over; false when the stream ended first.
func (s *HeartbeatStream) deliver(r HeartbeatResult) bool {
	select {
	case s.results <- r:
		return true
	case <-s.ctx.Done():
		return false
	}
}
