package runner

import (
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/nemesis"
)

// Timings are the cluster's: the executor's and Raft's.
type Timings struct {
	Renew, Grace, Toleration time.Duration
	// Raft's heartbeat and election timeouts and leader lease.
	Heartbeat, Election, LeaderLease time.Duration
}

// CITimings are SPEC's timings scaled down (renew 0.3 s, grace 1.5 s,
// toleration 4 s), with Raft timeouts a quarter of grace or less.
var CITimings = Timings{
	Renew: 300 * time.Millisecond, Grace: 1500 * time.Millisecond, Toleration: 4 * time.Second,
	Heartbeat: 300 * time.Millisecond, Election: 300 * time.Millisecond, LeaderLease: 300 * time.Millisecond,
}

// ProductionTimings are SPEC's defaults (renew 10 s, grace 50 s, toleration
// 300 s) with Raft's default timeouts.
var ProductionTimings = Timings{
	Renew: 10 * time.Second, Grace: 50 * time.Second, Toleration: 300 * time.Second,
	Heartbeat: time.Second, Election: time.Second, LeaderLease: 500 * time.Millisecond,
}

func (t Timings) nemesis() nemesis.Timings {
	return nemesis.Timings{Renew: t.Renew, Grace: t.Grace, Toleration: t.Toleration, Election: t.Election}
}

// Net modes.
const (
	NetAuto  = "auto"
	NetNetns = "netns"
	NetProxy = "proxy"
)

// Config is one run.
type Config struct {
	// Name labels the run (its directory under a profile's).
	Name string
	// Bin is a leasehold binary built with -tags chaos (the clock seam).
	Bin string
	// Self is the jepsen-lite binary, re-executed as worker processes.
	Self string
	// Out receives everything: histories, logs, data, the report.
	Out string
	// Nodes is 3 or 5; Workers the worker processes, each running
	// Concurrency jobs at once.
	Nodes, Workers, Concurrency int
	// ShellWorkers are `leasehold worker run` processes (the chaos build,
	// ids s1, s2, ...) beside the Go workers, taking the same jobs; each
	// job runs `jepsen-lite shell-job` under a supervisor of its own, with
	// Concurrency jobs at once. The shell family's faults need them.
	ShellWorkers int
	// Nemesis names families, kinds, or "mixed"; empty or "none" for a
	// run without faults.
	Nemesis []string
	// Duration is the fault phase (at least one of each fault kind).
	Duration time.Duration
	Seed     int64
	Net      string
	Timings  Timings
	// KillWorkerAtEnd kills a busy worker for good just before the heal,
	// leaving orphaned leases the cluster must re-lease (I12).
	KillWorkerAtEnd bool
	// Secure runs the cluster as it should run when exposed: the runner
	// makes a CA under Out/pki, and the nodes get server certificates for
	// mutual TLS on the peer port and TLS on the API, and tokens (admin,
	// submitter, worker) that every client uses with least privilege.
	// Otherwise the nodes run --insecure.
	Secure bool
	// Flood runs the flood beside the load (workload.Flood): from an
	// address of its own, gzip bombs and oversized bodies, connections
	// that never send their body, heartbeats and acquires from made-up
	// workers, and, in a secure run, wrong tokens, admin calls with a
	// non-admin token and calls in other workers' names.
	Flood bool
	// LogStore is the nodes' [raft] log_store: "wal" (the default) or
	// "boltdb". The profile runs both.
	LogStore string
	// DiskSize is the size of each node's tmpfs in a run with the disk
	// family (default DefaultDiskSize).
	DiskSize int64
	// DrainBound bounds the drain (default 3 × toleration + 30 s): a
	// broken build whose bug leaves jobs unfinished for good need not
	// wait the whole default to show it.
	DrainBound time.Duration
	// Expect: the build is broken on purpose and the run must find
	// violations of one of these invariants ("any" for any).
	Expect []string
	// Verbose copies the runner's log to stderr.
	Verbose bool
}

// DefaultDiskSize is each node's tmpfs in a run with disk faults: a CI
// run's data dir ends near 2 MiB (mixed, 40 s of faults), so 64 MiB holds
// thirty times that, and a fill costs 64 MiB of memory for its hold.
const DefaultDiskSize = 64 << 20

// Validate checks the configuration and fills defaults into a copy.
func (c Config) withDefaults() (Config, error) {
	if c.Bin == "" {
		return c, fmt.Errorf("runner: --bin is required: a leasehold binary built with -tags chaos")
	}
	if c.Out == "" {
		return c, fmt.Errorf("runner: --out is required")
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Nodes != 3 && c.Nodes != 5 {
		return c, fmt.Errorf("runner: --nodes %d: 3 or 5", c.Nodes)
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.ShellWorkers < 0 || c.ShellWorkers > 9 {
		return c, fmt.Errorf("runner: --shell-workers %d: 0 to 9", c.ShellWorkers)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 3
	}
	if c.Timings == (Timings{}) {
		c.Timings = CITimings
	}
	if c.Net == "" {
		c.Net = NetAuto
	}
	if !slices.Contains([]string{NetAuto, NetNetns, NetProxy}, c.Net) {
		return c, fmt.Errorf("runner: --net %q: auto, netns or proxy", c.Net)
	}
	if c.Name == "" {
		c.Name = "run"
	}
	if c.DiskSize == 0 {
		c.DiskSize = DefaultDiskSize
	}
	if c.DiskSize < 8<<20 {
		return c, fmt.Errorf("runner: --disk-size %d: at least 8 MiB (a node's data dir must fit with room)", c.DiskSize)
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	return c, nil
}
