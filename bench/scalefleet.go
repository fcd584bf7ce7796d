package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// scaleFleet is scale's simulated workers: worker i holds `per` leases, and
// what it must name in a heartbeat is kept in two flat arrays (job number
// and token, worker i's at [i*per, (i+1)*per)), with no pointer the bench's
// garbage collector has to scan: a million leases cost 12 MB here. Job and
// worker ids are derived from their numbers when a heartbeat is sent.
type scaleFleet struct {
	e *env
	// setup carries setup's calls on connections of its own: it runs while
	// the first workers already heartbeat, and must not queue behind their
	// heartbeats for a stream.
	setup *fleet
	// mux carries the heartbeats over streams; nil with Unary (one call
	// each).
	mux   *beatMux
	per   int
	renew time.Duration
	queue string

	jobs   []uint32
	tokens []uint64
	// lastAck is the send time (unix ns) of each worker's latest heartbeat
	// answered KEEP for every lease it named; gapMax the longest time
	// between two of one worker's that overlaps the window (ns).
	lastAck []atomic.Int64
	gapMax  atomic.Int64
	window  atomic.Pointer[beatWindow]

	// setupRetries counts setup calls tried again after failing.
	setupRetries atomic.Int64

	mu  sync.Mutex
	win beatStats // heartbeats due in the window
	// Over the whole run, setup and restart included: failed or unsent
	// heartbeats (the loop's stop aside) and leases answered anything but
	// KEEP.
	errsTotal, notKeepTotal int64
	kindsTotal              map[string]int64 // errsTotal by kind
}

// beatStats are the figures of the heartbeats due in the window.
type beatStats struct {
	due     int64 // due, sent or not
	ok      int64 // answered
	errs    int64 // failed, abandoned at the next slot, or unsent
	unsent  int64 // held back by the bound on heartbeats in flight
	notKeep int64 // leases answered STOP, LOST or not at all
	missed  int64 // heartbeats that did not renew every lease: errs, and answers with a lease not kept
	late    int64 // sent more than lateSend after the slot
	hist    *hist // latency from the slot, answered ones
	lag     *hist // send time minus slot: the generator's own delay
	kinds   map[string]int64
}

// lateSend is how far after its slot a heartbeat may leave before it
// counts as late: the generator, not the server, fell behind.
const lateSend = 10 * time.Millisecond

func newScaleFleet(e *env, setup *fleet, workers, per int) *scaleFleet {
	return &scaleFleet{e: e, setup: setup, per: per, renew: e.timings.renew, queue: e.run + "-scale",
		jobs: make([]uint32, workers*per), tokens: make([]uint64, workers*per), lastAck: make([]atomic.Int64, workers),
		win: beatStats{hist: newHist(), lag: newHist(), kinds: map[string]int64{}}, kindsTotal: map[string]int64{}}
}

func (s *scaleFleet) workerID(i int) string { return s.e.run + "-w" + strconv.Itoa(i) }

func (s *scaleFleet) jobID(n int) string { return s.queue + "-" + strconv.Itoa(n) }

// jobNumber is the inverse of jobID.
func (s *scaleFleet) jobNumber(id string) (int, error) {
	rest, ok := strings.CutPrefix(id, s.queue+"-")
	if !ok {
		return 0, fmt.Errorf("job %q is not of queue %s", id, s.queue)
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || n >= len(s.jobs) {
		return 0, fmt.Errorf("job %q: no number of this run", id)
	}
	return n, nil
}

// refs are what worker i names in a heartbeat.
func (s *scaleFleet) refs(i int) []*pb.LeaseRef {
	vals := make([]pb.LeaseRef, s.per)
	out := make([]*pb.LeaseRef, s.per)
	for j := range out {
		k := i*s.per + j
		vals[j].JobId, vals[j].Token = s.jobID(int(s.jobs[k])), s.tokens[k]
		out[j] = &vals[j]
	}
	return out
}

// submitAll submits jobs 0..n-1 to the fleet's queue over every client.
func (s *scaleFleet) submitAll(ctx context.Context, n, concurrency int) error {
	var done atomic.Int64
	defer s.e.progress("submitted", n, &done)()
	payload := make([]byte, s.e.cfg.PayloadSize)
	return parallel(ctx, n, concurrency, func(ctx context.Context, i int) error {
		spec := &pb.JobSpec{Id: s.jobID(i), Queue: s.queue, Kind: jobKind, Payload: payload, Submitter: s.e.run}
		err := s.retry(ctx, func(ctx context.Context) error {
			_, _, err := s.setup.pick().Submit(ctx, spec)
			return err
		})
		if err != nil {
			return fmt.Errorf("%w: submitting job %d: %w", ErrSetup, i, err)
		}
		done.Add(1)
		return nil
	})
}

// holdAll registers each worker with capacity per and has it acquire per
// leases, started; a worker's heartbeats begin (ready) as soon as it holds
// them.
func (s *scaleFleet) holdAll(ctx context.Context, workers, concurrency int, ready func(i int)) error {
	var done atomic.Int64
	defer s.e.progress("workers holding their leases", workers, &done)()
	return parallel(ctx, workers, concurrency, func(ctx context.Context, i int) error {
		cl, id := s.setup.pick(), s.workerID(i)
		err := s.retry(ctx, func(ctx context.Context) error {
			_, err := cl.RegisterWorker(ctx, id, uint32(s.per))
			return err
		})
		if err != nil {
			return fmt.Errorf("%w: registering %s: %w", ErrSetup, id, err)
		}
		got := 0
		for got < s.per {
			// Tried again with its request id, an acquire that did grant
			// answers with those grants, never with more.
			req := &pb.AcquireRequest{WorkerId: id, RequestId: newRequestID(), Queues: []string{s.queue},
				Max: uint32(s.per - got), Start: true, Wait: durationpb.New(time.Second)}
			var res *pb.AcquireResponse
			err := s.retry(ctx, func(ctx context.Context) (err error) {
				res, err = cl.Acquire(ctx, req)
				return err
			})
			if err != nil {
				return fmt.Errorf("%w: acquiring for %s: %w", ErrSetup, id, err)
			}
			if len(res.GetGrants()) == 0 {
				return fmt.Errorf("%w: %s was granted nothing with %d of its %d leases to go: the queue should hold them",
					ErrSetup, id, s.per-got, s.per)
			}
			for _, g := range res.GetGrants() {
				n, err := s.jobNumber(g.GetJob().GetSpec().GetId())
				if err != nil {
					return fmt.Errorf("%w: %w", ErrSetup, err)
				}
				k := i*s.per + got
				s.jobs[k], s.tokens[k] = uint32(n), g.GetLease().GetToken()
				got++
			}
		}
		ready(i)
		done.Add(1)
		return nil
	})
}

// setupAttempts bounds the tries of one setup call. The client already
// retries within its call timeout; setup, which runs for minutes against a
// cluster its own heartbeats keep busy, gives a call a few more before it
// gives up the run. Every setup call is safe to repeat: a submit of the
// same spec, a registration, an acquire with the same request id.
const setupAttempts = 5

func (s *scaleFleet) retry(ctx context.Context, call func(ctx context.Context) error) error {
	var err error
	for try := range setupAttempts {
		if try > 0 {
			s.setupRetries.Add(1)
		}
		if err = call(ctx); err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// newRequestID is a random acquire idempotency key.
func newRequestID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// beat sends worker i's heartbeat that was due at due, abandoned when the
// next one is due, and records it.
func (s *scaleFleet) beat(ctx context.Context, i int, due time.Time, inWindow bool) {
	cctx, cancel := context.WithDeadline(ctx, due.Add(s.renew))
	sent := time.Now()
	var resp *pb.HeartbeatResponse
	var err error
	if s.mux != nil {
		resp, err = s.mux.beat(cctx, s.workerID(i), s.refs(i))
	} else {
		resp, err = s.e.f.pick().Heartbeat(cctx, s.workerID(i), s.refs(i))
	}
	cancel()
	lat := time.Since(due)
	if ctx.Err() != nil {
		return // the loop stopped: not the cluster's doing
	}
	notKeep := 0
	if err == nil {
		notKeep = s.per - len(resp.GetLeases()) // a lease named but not answered
		for _, st := range resp.GetLeases() {
			if st.GetVerdict() != pb.Verdict_VERDICT_KEEP {
				notKeep++
			}
		}
		if notKeep == 0 {
			s.acked(i, sent)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errsTotal++
		s.kindsTotal[errKind(err)]++
	}
	s.notKeepTotal += int64(notKeep)
	if !inWindow {
		return
	}
	w := &s.win
	w.due++
	w.lag.add(sent.Sub(due))
	if sent.Sub(due) > lateSend {
		w.late++
	}
	if err != nil || notKeep > 0 {
		w.missed++
	}
	if err != nil {
		w.errs++
		w.kinds[errKind(err)]++
		return
	}
	w.ok++
	w.notKeep += int64(notKeep)
	w.hist.add(lat)
}

// unsent records a heartbeat the loop held back: too many were in flight.
// It failed as surely as one the server refused.
func (s *scaleFleet) unsent(i int, due time.Time, inWindow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errsTotal++
	s.kindsTotal["UNSENT"]++
	if !inWindow {
		return
	}
	w := &s.win
	w.due++
	w.errs++
	w.unsent++
	w.missed++
	w.kinds["UNSENT"]++
}

// acked records a heartbeat of worker i, sent at sent, that renewed every
// lease, and the gap since the previous one when it meets the window.
func (s *scaleFleet) acked(i int, sent time.Time) {
	for {
		prev := s.lastAck[i].Load()
		if prev >= sent.UnixNano() {
			return // a later one was answered first
		}
		if s.lastAck[i].CompareAndSwap(prev, sent.UnixNano()) {
			if prev != 0 && s.window.Load().overlaps(time.Unix(0, prev), sent) {
				s.noteGap(sent.Sub(time.Unix(0, prev)))
			}
			return
		}
	}
}

func (s *scaleFleet) noteGap(d time.Duration) {
	for {
		cur := s.gapMax.Load()
		if int64(d) <= cur || s.gapMax.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// closeGaps counts, for every worker whose latest renewal was before the
// window's end, the time from it to the end, and returns the longest gap.
func (s *scaleFleet) closeGaps(w *beatWindow) time.Duration {
	for i := range s.lastAck {
		if last := s.lastAck[i].Load(); last != 0 && last < w.to.UnixNano() {
			s.noteGap(w.to.Sub(time.Unix(0, last)))
		}
	}
	return time.Duration(s.gapMax.Load())
}

// progress logs done/total every 15 s until the returned func is called.
func (e *env) progress(what string, total int, done *atomic.Int64) (stop func()) {
	t0 := time.Now()
	stopc, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				n := done.Load()
				e.logf("%s: %d of %d (%.0f/s)", what, n, total, float64(n)/time.Since(t0).Seconds())
			case <-stopc:
				return
			}
		}
	}()
	return func() { close(stopc); <-finished }
}
