package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// beatMux carries many simulated workers' heartbeats over a few heartbeat
// streams, as a process hosting many workers would: each beat goes on the
// next stream and its caller waits for that beat's answer. One reader per
// stream hands each result to the caller waiting for its sequence number.
type beatMux struct {
	streams []*muxStream
	next    atomic.Uint64
	readers sync.WaitGroup
}

type muxStream struct {
	s       *client.HeartbeatStream
	mu      sync.Mutex
	waiting map[uint64]chan client.HeartbeatResult
	// early are results that came before their sender registered (the
	// send and the registration are not under one lock, so a send blocked
	// on flow control never holds up the reader).
	early map[uint64]client.HeartbeatResult
}

// newBeatMux opens one stream on each of the fleet's clients.
func newBeatMux(ctx context.Context, f *fleet) *beatMux {
	m := &beatMux{}
	for _, c := range f.clients {
		ms := &muxStream{s: c.HeartbeatStream(ctx), waiting: map[uint64]chan client.HeartbeatResult{},
			early: map[uint64]client.HeartbeatResult{}}
		m.streams = append(m.streams, ms)
		m.readers.Add(1)
		go func() {
			defer m.readers.Done()
			for r := range ms.s.Results() {
				ms.mu.Lock()
				ch, ok := ms.waiting[r.Seq]
				delete(ms.waiting, r.Seq)
				if !ok {
					ms.early[r.Seq] = r
				}
				ms.mu.Unlock()
				if ch != nil {
					ch <- r
				}
			}
		}()
	}
	return m
}

// beat sends one heartbeat and waits for its answer, or for ctx. A beat
// that failed with its connection (a stream sends only its newest beat
// again, being meant for one worker) is sent again, as the worker it
// stands for would.
func (m *beatMux) beat(ctx context.Context, workerID string, refs []*pb.LeaseRef) (*pb.HeartbeatResponse, error) {
	for {
		resp, err := m.beatOnce(ctx, workerID, refs)
		if err == nil || ctx.Err() != nil || !resendable(err) {
			return resp, err
		}
	}
}

// resendable is a beat's failure that another beat may not meet: its
// connection ended, or reached a node that does not lead.
func resendable(err error) bool {
	var ce *client.Error
	return errors.Is(err, client.ErrSuperseded) || errors.Is(err, client.ErrNotLeader) || errors.Is(err, client.ErrNoLeader) ||
		errors.Is(err, client.ErrNotReady) || errors.Is(err, client.ErrShuttingDown) ||
		errors.As(err, &ce) && ce.Reason == "" && ce.Code == connect.CodeUnavailable
}

func (m *beatMux) beatOnce(ctx context.Context, workerID string, refs []*pb.LeaseRef) (*pb.HeartbeatResponse, error) {
	ms := m.streams[(m.next.Add(1)-1)%uint64(len(m.streams))]
	ch := make(chan client.HeartbeatResult, 1)
	seq, err := ms.s.Send(workerID, refs)
	if err != nil {
		return nil, err
	}
	ms.mu.Lock()
	if r, ok := ms.early[seq]; ok {
		delete(ms.early, seq)
		ms.mu.Unlock()
		return r.Response, r.Err
	}
	ms.waiting[seq] = ch
	ms.mu.Unlock()
	select {
	case r := <-ch:
		return r.Response, r.Err
	case <-ctx.Done():
		ms.mu.Lock()
		if _, pending := ms.waiting[seq]; pending {
			ms.waiting[seq] = nil // abandoned: the reader drops its result
		}
		ms.mu.Unlock()
		return nil, ctx.Err()
	}
}

// close ends every stream and waits for the readers.
func (m *beatMux) close() {
	for _, ms := range m.streams {
		ms.s.Close()
	}
	m.readers.Wait()
}
