package bench

import (
	"context"
	"fmt"
	"sync"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// runHeartbeat measures heartbeats: each caller is a worker holding Leases
// leases and heartbeats them back to back, as fast as the cluster answers.
// A heartbeat touches no disk; it waits for the leader's batched quorum
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
	ops := make([]op, e.cfg.Concurrency)
	for i := range ops {
		id := e.workerIDs("hb", i, 1)[0]
		refs := held[id]
		ops[i] = func(ctx context.Context) error {
			resp, err := e.f.pick().Heartbeat(ctx, id, refs)
			if err != nil {
				return err
			}
			for _, st := range resp.GetLeases() {
				if st.GetVerdict() != pb.Verdict_VERDICT_KEEP {
					return fmt.Errorf("heartbeat of %s: lease %d: %s: %w", id, st.GetToken(), st.GetVerdict(), errLost)
				}
			}
			return nil
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
