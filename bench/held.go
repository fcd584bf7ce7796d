package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// heldSet is workers holding leases and heartbeating them on schedule, as
// the worker runtime does: one heartbeat per renew, on a fixed phase, sent
// whatever happened to the previous one (an open loop), over a heartbeat
// stream per worker (or one call each, Unary), each given up when the next
// is due. Latency is measured from when a heartbeat was due, so a server
// that falls behind shows it rather than slowing the load down.
type heldSet struct {
	e     *env
	renew time.Duration
	base  context.Context // heartbeats in flight run on this
	stopc chan struct{}   // closed by stop: no more heartbeats are sent
	wg    sync.WaitGroup  // schedules and heartbeats in flight

	mu      sync.Mutex
	workers []*heldWorker
	tokens  map[uint64]*heldWorker
	hist    *hist
	winFrom time.Time // heartbeats due in [winFrom, winTo) are counted
	winTo   time.Time
	sent    int64
	failed  int64
	stopped bool

	background atomic.Int64 // every heartbeat sent, window or not
}

type heldWorker struct {
	id   string
	refs []*pb.LeaseRef

	mu sync.Mutex
	// acks are the send times of heartbeats answered KEEP for every lease
	// named: the times the worker's self-stop clock restarts from.
	acks []time.Time
	// lost are tokens a heartbeat answered LOST, with its send time.
	lost map[uint64]time.Time
}

func newHeldSet(ctx context.Context, e *env) *heldSet {
	return &heldSet{e: e, renew: e.timings.renew, base: ctx, stopc: make(chan struct{}), tokens: map[uint64]*heldWorker{}, hist: newHist()}
}

// add starts heartbeating a worker's leases, at a random phase within the
// first renew so the workers' heartbeats spread out.
func (h *heldSet) add(id string, refs []*pb.LeaseRef) *heldWorker {
	w := &heldWorker{id: id, refs: refs, lost: map[uint64]time.Time{}, acks: []time.Time{time.Now()}}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return w
	}
	h.workers = append(h.workers, w)
	for _, r := range refs {
		h.tokens[r.GetToken()] = w
	}
	if h.e.cfg.Unary {
		h.wg.Go(func() { h.schedule(w) })
	} else {
		h.wg.Go(func() { h.stream(w) })
	}
	return w
}

// stream heartbeats w's leases over a heartbeat stream of its own, one beat
// per renew from a random phase, as the worker runtime does: a beat still
// unanswered when the next is due is given up (a failure) and the stream
// reconnects.
func (h *heldSet) stream(w *heldWorker) {
	s := h.e.f.pick().HeartbeatStream(h.base)
	defer s.Close()
	var inflight []sentBeat
	take := func(r client.HeartbeatResult) { // answers the beat r is for
		i := slices.IndexFunc(inflight, func(b sentBeat) bool { return b.seq == r.Seq })
		if i < 0 {
			return // given up already
		}
		b := inflight[i]
		inflight = slices.Delete(inflight, i, i+1)
		if r.Err == nil {
			w.acknowledge(b.sent, r.Response)
		}
		h.record(b.due, time.Since(b.due), r.Err)
	}
	next := time.Now().Add(rand.N(h.renew))
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			for drained := false; !drained; { // answers that came with the tick
				select {
				case r, ok := <-s.Results():
					if !ok {
						return
					}
					take(r)
				default:
					drained = true
				}
			}
			if len(inflight) > 0 {
				for _, b := range inflight {
					h.record(b.due, 0, context.DeadlineExceeded)
				}
				inflight = inflight[:0]
				s.Reset()
			}
			h.background.Add(1)
			sent := time.Now()
			seq, err := s.Send(w.id, w.refs)
			if err != nil {
				return
			}
			inflight = append(inflight, sentBeat{seq: seq, due: next, sent: sent})
			next = next.Add(h.renew)
			t.Reset(time.Until(next))
		case r, ok := <-s.Results():
			if !ok {
				return
			}
			take(r)
		case <-h.stopc:
			h.finish(s, &inflight, take)
			return
		case <-h.base.Done():
			return
		}
	}
}

// finish waits for the answers to beats in flight when the set stops, each
// until the next would have been due, as the unary schedule waits for its
// calls in flight.
func (h *heldSet) finish(s *client.HeartbeatStream, inflight *[]sentBeat, take func(client.HeartbeatResult)) {
	for len(*inflight) > 0 {
		first := (*inflight)[0]
		t := time.NewTimer(time.Until(first.due.Add(h.renew)))
		select {
		case r, ok := <-s.Results():
			t.Stop()
			if !ok {
				return
			}
			take(r)
		case <-t.C:
			h.record(first.due, 0, context.DeadlineExceeded)
			*inflight = (*inflight)[1:]
		case <-h.base.Done():
			return
		}
	}
}

// sentBeat is a held worker's beat in flight on its stream.
type sentBeat struct {
	seq       uint64
	due, sent time.Time
}

// schedule sends each of w's heartbeats as its own call, when due.
func (h *heldSet) schedule(w *heldWorker) {
	next := time.Now().Add(rand.N(h.renew))
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-h.stopc:
			return
		case <-h.base.Done():
			return
		}
		due := next
		h.wg.Go(func() { h.beat(w, due) })
		next = next.Add(h.renew)
		t.Reset(time.Until(next))
	}
}

// beat sends one heartbeat that was due at due, abandoned a renew later.
func (h *heldSet) beat(w *heldWorker, due time.Time) {
	h.background.Add(1)
	ctx, cancel := context.WithDeadline(h.base, due.Add(h.renew))
	sent := time.Now()
	resp, err := h.e.f.pick().Heartbeat(ctx, w.id, w.refs)
	cancel()
	lat := time.Since(due)
	if err == nil {
		w.acknowledge(sent, resp)
	}
	h.record(due, lat, err)
}

// record counts a heartbeat due at due that took lat, or failed, if it was
// due inside the window.
func (h *heldSet) record(due time.Time, lat time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if due.Before(h.winFrom) || !due.Before(h.winTo) {
		return
	}
	h.sent++
	if err != nil {
		h.failed++
		return
	}
	h.hist.add(lat)
}

func (w *heldWorker) acknowledge(sent time.Time, resp *pb.HeartbeatResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keep := true
	for _, st := range resp.GetLeases() {
		if st.GetVerdict() == pb.Verdict_VERDICT_LOST {
			keep = false
			if _, ok := w.lost[st.GetToken()]; !ok {
				w.lost[st.GetToken()] = sent
			}
		}
	}
	if keep {
		w.acks = append(w.acks, sent)
	}
}

// lastAck is the send time of the latest heartbeat answered KEEP that was
// sent before t (zero if none).
func (w *heldWorker) lastAck(t time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	for _, a := range w.acks {
		if a.Before(t) && a.After(last) {
			last = a
		}
	}
	return last
}

// setWindow says which heartbeats count: those due in [from, to).
func (h *heldSet) setWindow(from, to time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.winFrom, h.winTo = from, to
}

// stop sends no more heartbeats and waits for those in flight to end.
func (h *heldSet) stop() {
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		close(h.stopc)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

func (h *heldSet) owner(token uint64) *heldWorker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tokens[token]
}

func (h *heldSet) leases() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.tokens)
}

// heldStats are the open loop's figures over the window.
type heldStats struct {
	sent, failed  int64
	p50, p99, max time.Duration
	// maxGap is the longest time between two acknowledged heartbeats of one
	// worker (send to send), counting the time from the last one to the
	// window's end.
	maxGap time.Duration
	lost   map[uint64]bool // tokens answered LOST
}

func (h *heldSet) stats() heldStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := heldStats{sent: h.sent, failed: h.failed, p50: h.hist.quantile(0.5), p99: h.hist.quantile(0.99), max: h.hist.max,
		lost: map[uint64]bool{}}
	for _, w := range h.workers {
		w.mu.Lock()
		acks := slices.Clone(w.acks)
		for tok := range w.lost {
			s.lost[tok] = true
		}
		w.mu.Unlock()
		slices.SortFunc(acks, time.Time.Compare)
		for i := 1; i < len(acks); i++ {
			if acks[i].Before(h.winFrom) || acks[i-1].After(h.winTo) {
				continue
			}
			s.maxGap = max(s.maxGap, acks[i].Sub(acks[i-1]))
		}
		if n := len(acks); n > 0 && acks[n-1].Before(h.winTo) {
			s.maxGap = max(s.maxGap, h.winTo.Sub(acks[n-1]))
		}
	}
	return s
}

// hold registers ceil(n/per) workers of capacity per, submits n jobs to a
// queue of their own, and has each worker acquire its share; each worker's
// heartbeats start as soon as it holds its leases. It returns the queue.
func (e *env) hold(ctx context.Context, h *heldSet, name string, n, per int) (string, error) {
	t0 := time.Now()
	nw := (n + per - 1) / per
	queue, err := e.acquireShares(ctx, name, n, per, func(id string, refs []*pb.LeaseRef) { h.add(id, refs) })
	if err != nil {
		return "", err
	}
	e.logf("holding %d leases in %d workers, heartbeated every %s (setup %s, untimed)", h.leases(), nw, h.renew,
		time.Since(t0).Round(time.Millisecond))
	return queue, nil
}

// acquireShares registers ceil(n/per) workers of capacity per, submits n
// jobs to a queue of their own, and has each worker acquire per of them
// (the last one the rest). got is called for each worker as soon as it
// holds its share. It returns the jobs' queue.
func (e *env) acquireShares(ctx context.Context, name string, n, per int, got func(id string, refs []*pb.LeaseRef)) (string, error) {
	nw := (n + per - 1) / per
	ids := e.workerIDs(name, 0, nw)
	if err := e.register(ctx, ids, per); err != nil {
		return "", err
	}
	p := e.newPool(name)
	if err := p.fill(ctx, n); err != nil {
		return "", err
	}
	cl := e.f.first()
	var held atomic.Int64
	err := parallel(ctx, nw, setupConcurrency, func(ctx context.Context, i int) error {
		want := min(per, n-i*per)
		var refs []*pb.LeaseRef
		for len(refs) < want {
			res, err := cl.Acquire(ctx, &pb.AcquireRequest{WorkerId: ids[i], Queues: []string{p.queue}, Max: uint32(want - len(refs)),
				Start: true, Wait: durationpb.New(time.Second)})
			if err != nil {
				return err
			}
			if len(res.GetGrants()) == 0 {
				break // the others took the rest
			}
			for _, g := range res.GetGrants() {
				refs = append(refs, &pb.LeaseRef{JobId: g.GetJob().GetSpec().GetId(), Token: g.GetLease().GetToken()})
			}
		}
		held.Add(int64(len(refs)))
		if len(refs) > 0 {
			got(ids[i], refs)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("%w: acquiring %d leases: %w", ErrSetup, n, err)
	}
	if h := held.Load(); h != int64(n) {
		return "", fmt.Errorf("%w: %d of %d leases acquired", ErrSetup, h, n)
	}
	return p.queue, nil
}
