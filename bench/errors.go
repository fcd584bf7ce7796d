package bench

import "errors"

var (
	// ErrInvalidConfig: a Config field is out of range; the message names
	// the field and the value.
	ErrInvalidConfig = errors.New("invalid bench config")
	// ErrNeedsLocalCluster: the workload kills servers, which only a cluster
	// this package started (StartCluster) can do.
	ErrNeedsLocalCluster = errors.New("workload needs a cluster started by the bench (--start)")
	// ErrClusterStart: the local cluster did not come up; the message
	// carries the tail of the failing node's log.
	ErrClusterStart = errors.New("local cluster did not start")
	// ErrSetup: the workload could not prepare its jobs, workers or leases.
	ErrSetup = errors.New("bench setup failed")

	// errDrained: a caller found no queued job, so the pre-submitted pool
	// ran out before the window ended. The window ends there.
	errDrained = errors.New("job pool drained")
	// errNoGrant: an acquire granted nothing although the pool had jobs
	// left for it. Counted as an error (NO_GRANT).
	errNoGrant = errors.New("no grant")
	// errLost: a heartbeat answered LOST for a lease the bench holds.
	errLost = errors.New("lease lost")
)
