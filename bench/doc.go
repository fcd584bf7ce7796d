// Package bench measures a leasehold cluster the way operators measure etcd:
// a fixed number of concurrent callers, each with one request in flight
// (closed loop), for a fixed duration after a warmup, reporting throughput,
// latency percentiles, errors, the CPU the servers and the generator burnt,
// and how many Raft log writes (fsyncs) each operation cost.
//
// Workloads that model workers holding leases also run an open loop: every
// held lease's worker heartbeats once per renew on its own schedule, whatever
// the replies do, and its latency is measured from the time the heartbeat
// was due, so a slow server cannot hide its slowness by slowing the load
// down (coordinated omission).
//
// The package talks to the cluster only through the client and the API's
// plain HTTP endpoints (/readyz, /metrics). It can start a cluster of its
// own, as separate `leasehold server` processes with data on disk (the
// repository's one launcher, internal/localcluster), which it needs for
// what only a process owner can do: read the servers' CPU from /proc and
// kill the leader with SIGKILL.
//
// Only operations started inside the measured window count, and every one
// that fails is counted as an error; an acquire that grants nothing while
// the pre-submitted pool still has jobs is an error too, not the pool's end.
// Where the cluster keeps a count of its own, the bench reads it back
// (expiry's jobs queued again, fencing's grants and stale reports from the
// event log), and the tests compare the rest with the cluster's state (jobs
// reported against the cycles counted).
//
// `leasehold bench` (cmd/leasehold) is the command line; sweep.sh, behind
// `make bench`, runs every workload at several concurrencies and gathers
// the RESULT lines into one table. docs/performance.md explains every
// workload and every key of the RESULT line, and how to read them.
package bench
