package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/gen/leasehold/v1/leaseholdv1connect"
)

// A heartbeat stream is served by the leader alone, within one term of its
// office (cluster.Heartbeats): a follower, or a leader not yet in office,
// ends it at once with the answer a heartbeat would get there (NOT_LEADER
// naming the leader), and the client reconnects to the leader. Streams are
// never forwarded: a forwarded stream would tie the answer to a hop that
// may outlive the leader's term.
//
// Two goroutines serve a stream. The reader takes each beat off the wire,
// checks the worker scope and the rate, and records it (Arrive renews on
// arrival), then queues it. The handler's own goroutine answers: it waits
// for a quorum check that began after the queued beats arrived, then sends
// one answer per beat, in arrival order, each carrying the beat's seq, and
// flushes them once (answerBatch). So a slow check holds back answers,
// never the reading and recording of the next beat. An error for one beat ends the stream once the beats before it
// are answered.

// maxBeatsQueued bounds the beats of one stream recorded and not yet
// answered. Past it the reader waits, and HTTP/2 flow control slows the
// sender; a worker sends one beat per renew and never comes near it.
const maxBeatsQueued = 256

// heartbeatStreamHandler serves WorkerService.HeartbeatStream on its own,
// so it can bound each message (a stream's body never ends, so limitBody
// cannot bound the body as a whole).
func (s *Server) heartbeatStreamHandler(opts connect.HandlerOption) (string, http.Handler) {
	method := pb.File_leasehold_v1_workers_proto.Services().ByName("WorkerService").Methods().ByName("HeartbeatStream")
	var readMax []connect.HandlerOption
	if s.limits.MaxRequestBytes > 0 {
		readMax = append(readMax, connect.WithReadMaxBytes(s.limits.MaxRequestBytes))
	}
	return leaseholdv1connect.WorkerServiceHeartbeatStreamProcedure, connect.NewBidiStreamHandler(
		leaseholdv1connect.WorkerServiceHeartbeatStreamProcedure, workerService{s}.HeartbeatStream,
		append([]connect.HandlerOption{connect.WithSchema(method), opts}, readMax...)...)
}

func (w workerService) HeartbeatStream(ctx context.Context, stream *connect.BidiStream[pb.HeartbeatStreamRequest, pb.HeartbeatStreamResponse]) error {
	return w.s.serveHeartbeats(ctx, stream.Conn())
}

// beat is one beat read off a stream; beats are reused once answered.
type beat struct {
	req     pb.HeartbeatStreamRequest
	refs    []fsm.LeaseRef
	notes   []cluster.ProgressNote
	arrival cluster.Arrival
}

// beatQueue is what a stream's reader hands its answerer.
type beatQueue struct {
	mu     sync.Mutex
	queued []*beat
	free   []*beat
	err    error // why the reader stopped (io.EOF: the client closed its side)
	done   bool  // the reader stopped
	ended  bool  // the answerer ended: the reader must stop
	// wake tells the answerer that beats are queued or the reader stopped;
	// room tells the reader that the queue has room again.
	wake, room chan struct{}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// get returns a beat to read into, waiting while the queue is full; nil
// once the answerer has ended.
func (q *beatQueue) get() *beat {
	for {
		q.mu.Lock()
		switch {
		case q.ended:
			q.mu.Unlock()
			return nil
		case len(q.queued) < maxBeatsQueued:
			var b *beat
			if n := len(q.free); n > 0 {
				b, q.free = q.free[n-1], q.free[:n-1]
			} else {
				b = new(beat)
			}
			q.mu.Unlock()
			return b
		}
		q.mu.Unlock()
		<-q.room
	}
}

func (q *beatQueue) put(b *beat) {
	q.mu.Lock()
	q.queued = append(q.queued, b)
	q.mu.Unlock()
	signal(q.wake)
}

// stop records why the reader stopped.
func (q *beatQueue) stop(err error) {
	q.mu.Lock()
	q.err, q.done = err, true
	q.mu.Unlock()
	signal(q.wake)
}

// take moves the queued beats into batch (emptied first) and says whether
// the reader has stopped, and why.
func (q *beatQueue) take(batch []*beat) ([]*beat, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch = append(batch[:0], q.queued...)
	clear(q.queued)
	q.queued = q.queued[:0]
	if len(batch) > 0 {
		signal(q.room)
	}
	return batch, q.done, q.err
}

// release returns answered beats for reuse.
func (q *beatQueue) release(batch []*beat) {
	q.mu.Lock()
	q.free = append(q.free, batch...)
	q.mu.Unlock()
}

// end tells the reader to stop taking beats.
func (q *beatQueue) end() {
	q.mu.Lock()
	q.ended = true
	q.mu.Unlock()
	signal(q.room)
}

// serveHeartbeats answers one stream until the client closes its side, an
// error for a beat, the end of this node's term, the server's shutdown, or
// the client going away; the reader has stopped when it returns.
func (s *Server) serveHeartbeats(ctx context.Context, conn connect.StreamingHandlerConn) error {
	hb, err := s.node.Heartbeats()
	if err != nil {
		return toWire(err)
	}
	q := &beatQueue{wake: make(chan struct{}, 1), room: make(chan struct{}, 1)}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		s.readBeats(ctx, conn, hb, q)
	}()
	defer func() {
		q.end()
		// Reading the body is the one wait the reader cannot be woken
		// from otherwise.
		if body := requestOf(ctx).body; body != nil {
			body.Close()
		}
		<-readerDone
	}()

	var (
		idle     <-chan time.Time
		answers  int64 // beats answered, for the idle check
		seen     int64 // answers at the last idle check
		batch    []*beat
		res      cluster.HeartbeatResult
		rc       = requestOf(ctx).answers
		aw       = requestOf(ctx).batch
		bound    = s.streamIdle()
		deadline = answerDeadline{bound: bound}
	)
	if bound > 0 {
		t := time.NewTicker(bound)
		defer t.Stop()
		idle = t.C
	} else {
		rc = nil
	}
	out := newBeatAnswer(s.timingsPB)
	for {
		select {
		case <-q.wake:
		case <-ctx.Done():
			return toWire(ctx.Err())
		case <-hb.Done():
			return toWire(hb.NotLeader())
		case <-idle:
			if answers == seen {
				return toWire(fmt.Errorf("%w: no heartbeat on the stream for %s", cluster.ErrTimeout, bound))
			}
			seen = answers
			if rc != nil && deadline.idle(time.Now()) {
				_ = rc.SetWriteDeadline(time.Time{})
			}
			continue
		}
		var stopped bool
		var readErr error
		batch, stopped, readErr = q.take(batch)
		if len(batch) > 0 {
			if err := hb.Confirm(ctx); err != nil {
				return toWire(err)
			}
			if rc != nil {
				if at, set := deadline.batch(time.Now()); set {
					_ = rc.SetWriteDeadline(at)
				}
			}
			n, err := answerBatch(conn, aw, hb, &res, out, batch)
			answers += int64(n)
			if err != nil {
				return err // the client went away
			}
			q.release(batch)
		}
		if stopped {
			if errors.Is(readErr, io.EOF) {
				return nil
			}
			return readErr
		}
	}
}

// answerBatch answers a batch of beats in order, one message each, and
// returns how many it sent. Connect flushes after every message; aw (nil
// when the writer cannot flush) holds those flushes until the batch is
// written, so the batch leaves in one flush: the answers of many workers
// sharing a stream cost a hand-off to the connection's writer per 4 KiB
// (the HTTP/2 server's chunk), not one each
// (docs/performance-history.md). Answers still leave only after the check
// that covers them, and none waits for a later beat.
func answerBatch(conn connect.StreamingHandlerConn, aw *answerWriter, hb *cluster.Heartbeats, res *cluster.HeartbeatResult, out *beatAnswer, batch []*beat) (int, error) {
	if aw != nil && len(batch) > 1 {
		aw.hold()
		defer aw.release()
	}
	for i, b := range batch {
		h := b.req.GetHeartbeat()
		hb.Answer(res, h.GetWorkerId(), b.refs, b.arrival)
		if err := conn.Send(out.of(b.req.GetSeq(), res)); err != nil {
			return i, err
		}
	}
	return len(batch), nil
}

// answerWriter is a heartbeat stream's response writer. While held, a
// flush is only noted; release makes the one flush the held ones stood
// for. Only the stream's handler goroutine writes and flushes (its reader
// only reads), so it needs no lock.
type answerWriter struct {
	http.ResponseWriter
	flusher http.Flusher
	held    bool
	missed  bool // a flush was asked for while held
}

func (a *answerWriter) Flush() {
	if a.held {
		a.missed = true
		return
	}
	a.flusher.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

func (a *answerWriter) hold() { a.held = true }

func (a *answerWriter) release() {
	a.held = false
	if a.missed {
		a.missed = false
		a.flusher.Flush()
	}
}

// readBeats reads, checks and records beats until the stream or a beat
// fails, or the answerer ends.
func (s *Server) readBeats(ctx context.Context, conn connect.StreamingHandlerConn, hb *cluster.Heartbeats, q *beatQueue) {
	// Streams are never forwarded, so every beat spends the caller's
	// budget here (a forwarded mark on a stream earns no exemption).
	req := requestOf(ctx)
	bucket := s.rates.bucket(req.id) // looked up again only on a reload
	for {
		b := q.get()
		if b == nil {
			return
		}
		if err := conn.Receive(&b.req); err != nil {
			if connect.CodeOf(err) == connect.CodeResourceExhausted {
				// Connect's bound on one message (WithReadMaxBytes).
				err = toWire(fmt.Errorf("%w: heartbeat: %v", fsm.ErrTooLarge, err))
			}
			q.stop(err)
			return
		}
		if req.reidentify != nil && s.creds.Load() != req.creds {
			// The credentials were reloaded (SIGHUP) since the caller was
			// identified: a removed or narrowed credential stops here.
			again, err := req.reidentify()
			if err != nil {
				q.stop(toWire(err))
				return
			}
			req, bucket = again, s.rates.bucket(again.id)
			ctx = withRequest(ctx, req)
		}
		h := b.req.GetHeartbeat()
		if err := s.actAsWorker(ctx, h.GetWorkerId()); err != nil {
			q.stop(toWire(err))
			return
		}
		if ok, wait := spend(bucket, time.Now()); !ok {
			q.stop(rateLimited(wait))
			return
		}
		clear(b.refs) // the last beat's ids are let go (beatdecode.go)
		b.refs = b.refs[:0]
		for _, r := range h.GetLeases() {
			b.refs = append(b.refs, fsm.LeaseRef{JobID: r.GetJobId(), Token: r.GetToken()})
		}
		b.notes = notesFromProto(b.notes[:0], h.GetNotes())
		a, err := hb.Arrive(h.GetWorkerId(), b.refs, b.notes...)
		if err != nil {
			q.stop(toWire(err))
			return
		}
		b.arrival = a
		q.put(b)
	}
}

// streamIdle bounds how long a heartbeat stream may go without a beat:
// body_timeout, but never less than three renews (a worker beats once per
// renew). Zero when body_timeout is off.
func (s *Server) streamIdle() time.Duration {
	if s.limits.BodyTimeout <= 0 {
		return 0
	}
	renew, _, _ := s.node.Timings()
	return max(s.limits.BodyTimeout, 3*renew)
}

// answerDeadline keeps a heartbeat stream's write deadline. A client that
// stops reading blocks Send on flow control, where neither the idle bound
// nor the term's end reaches it: a write deadline on the stream cuts such
// a Send off. Setting one is a message to the connection's serving
// goroutine and a timer, so it is not set and cleared around every batch
// of answers (docs/performance-history.md). A batch finds it 1.5 to 2
// idle bounds ahead, or sets it 2 bounds ahead; an idle tick, which comes
// every bound, clears it once it is less than 1.5 bounds ahead, since a
// write deadline that passes resets the stream even when nothing is being
// written. So it
// never passes between batches, a Send that flow control holds is cut off
// 1.5 to 2 bounds after its batch began, and a worker that beats steadily
// has it set about once per half bound.
type answerDeadline struct {
	bound time.Duration
	at    time.Time // the deadline set; zero: none
}

// batch is called before a batch of answers is written at now: it says
// whether to set the deadline, and to when.
func (d *answerDeadline) batch(now time.Time) (time.Time, bool) {
	if !d.at.IsZero() && d.at.Sub(now) >= 3*d.bound/2 {
		return time.Time{}, false
	}
	d.at = now.Add(2 * d.bound)
	return d.at, true
}

// idle is called at an idle tick, while nothing is written: it says
// whether to clear the deadline, which might pass before the next tick.
func (d *answerDeadline) idle(now time.Time) bool {
	if d.at.IsZero() || d.at.Sub(now) >= 3*d.bound/2 {
		return false
	}
	d.at = time.Time{}
	return true
}

// beatAnswer is a stream's answer message, reused for every beat: Send
// marshals it before it returns.
type beatAnswer struct {
	msg      pb.HeartbeatStreamResponse
	reply    pb.HeartbeatResponse
	statuses []*pb.LeaseStatus // grown, never shrunk
}

func newBeatAnswer(timings *pb.Timings) *beatAnswer {
	a := &beatAnswer{}
	a.reply.Timings = timings
	a.msg.Heartbeat = &a.reply
	return a
}

// of fills the message with the answer to beat seq.
func (a *beatAnswer) of(seq uint64, res *cluster.HeartbeatResult) *pb.HeartbeatStreamResponse {
	a.msg.Seq = seq
	a.statuses = heartbeatToProto(&a.reply, res, a.statuses)
	return &a.msg
}
