package bench

import (
	"context"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// runHeartbeat measures heartbeats: each caller is a worker holding Leases
// leases and heartbeats back to back, as fast as the cluster answers: over
// a heartbeat stream of its own (c callers, c streams), sending the next
// beat when the last one is answered; over one stream per client shared by
// all (Shared: c callers, Conns streams, each beat still answered on its
// own); or with one call each (Unary). A
// heartbeat touches no disk; it waits for the leader's batched quorum
// check, so its cost is network round trips and CPU.
func runHeartbeat(ctx context.Context, e *env) (*Result, error) {
	per := e.cfg.Leases
	var mu sync.Mutex
	held := map[string][]*pb.LeaseRef{}
	_, err := e.acquireShares(ctx, "hb", e.cfg.Concurrency*per, per, func(id string, refs []*pb.LeaseRef) {
		mu.Lock()
		defer mu.Unlock()
		held[id] = refs
	})
	if err != nil {
		return nil, err
	}
	var mux *beatMux
	if e.cfg.Shared && !e.cfg.Unary {
		mux = newBeatMux(ctx, e.f)
		defer mux.close()
	}
	ops := make([]op, e.cfg.Concurrency)
	for i := range ops {
		id := e.workerIDs("hb", i, 1)[0]
		refs := held[id]
		check := func(resp *pb.HeartbeatResponse) error {
			for _, st := range resp.GetLeases() {
				if st.GetVerdict() != pb.Verdict_VERDICT_KEEP {
					return fmt.Errorf("heartbeat of %s: lease %d: %s: %w", id, st.GetToken(), st.GetVerdict(), errLost)
				}
			}
			return nil
		}
		if e.cfg.Unary {
			ops[i] = func(ctx context.Context) error {
				resp, err := e.f.pick().Heartbeat(ctx, id, refs)
				if err != nil {
					return err
				}
				return check(resp)
			}
			continue
		}
		if mux != nil {
			ops[i] = func(ctx context.Context) error {
				// Sent again when superseded, as a worker sharing a
				// stream must (beatMux.beat).
				resp, err := mux.beat(ctx, id, refs)
				if err != nil {
					return err
				}
				return check(resp)
			}
			continue
		}
		s := e.f.pick().HeartbeatStream(ctx)
		defer s.Close()
		ops[i] = func(ctx context.Context) error {
			resp, err := beatOnce(ctx, s, id, refs)
			if err != nil {
				return err
			}
			return check(resp)
		}
	}
	p, w, err := e.measure(ctx, ops, hooks{})
	if err != nil {
		return nil, err
	}
	r := e.result(p, w, 0)
	r.add("workers", e.cfg.Concurrency)
	r.add("leases_per_worker", per)
	r.add("leases_renewed_s", num(r.OpsPerSec*float64(per), 1))
	r.add("lost", p.errKinds["LOST"])
	return r, nil
}

// beatOnce sends one beat on s and waits for its result; results of beats
// whose caller gave up earlier are skipped.
func beatOnce(ctx context.Context, s *client.HeartbeatStream, id string, refs []*pb.LeaseRef) (*pb.HeartbeatResponse, error) {
	seq, err := s.Send(id, refs)
	if err != nil {
		return nil, err
	}
	for {
		select {
		case r, ok := <-s.Results():
			if !ok {
				return nil, client.ErrClosed
			}
			if r.Seq == seq {
				return r.Response, r.Err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// transport names how the workload's heartbeats travel, for the RESULT
// line.
func (e *env) transport() string {
	switch {
	case e.cfg.Unary:
		return "unary"
	case e.cfg.Shared && e.cfg.Workload == "heartbeat":
		return "shared"
	}
	return "stream"
}
