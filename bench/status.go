package bench

import (
	"context"
	"fmt"
)

// runStatus measures the API alone: each caller asks the node it targets
// for its status (ClusterService.Status) back to back. A status call
// proposes nothing and waits for no quorum; it reads the node's Raft
// indexes and the state's summary (its counts, and its queues: none on a
// fresh cluster). So it costs about what every call costs: the HTTP/2 and
// Connect work at both ends, authentication and the hand-offs between
// them. It is the floor under the other workloads' latency and CPU per
// call.
func runStatus(ctx context.Context, e *env) (*Result, error) {
	ops := make([]op, e.cfg.Concurrency)
	for i := range ops {
		ops[i] = func(ctx context.Context) error {
			resp, err := e.f.pick().Status(ctx)
			if err != nil {
				return err
			}
			if resp.GetId() == "" {
				return fmt.Errorf("status: no node id in the answer")
			}
			return nil
		}
	}
	p, w, err := e.measure(ctx, ops, hooks{})
	if err != nil {
		return nil, err
	}
	return e.result(p, w, 0), nil
}
