package bench

import (
	"crypto/tls"
	"fmt"
	"io"
	"slices"
	"time"
)

// Target says where calls go.
type Target string

const (
	// TargetLeader pins calls to the leader: the client follows the leader
	// hint every answer carries.
	TargetLeader Target = "leader"
	// TargetAny spreads calls round-robin over every endpoint, one client
	// per endpoint that stays there; followers forward to the leader.
	TargetAny Target = "any"
)

// Workloads are the workloads Run knows, in the order the docs explain them.
var Workloads = []string{"acquire", "heartbeat", "status", "job-cycle", "mixed", "expiry", "failover", "fencing", "scale"}

// maxWorkers is the server's bound on registered workers (fsm.MaxWorkers).
const maxWorkers = 100_000

// Config is one run. Zero fields take the defaults in withDefaults, except
// Warmup and PayloadSize, whose zero means none.
type Config struct {
	// Workload is one of Workloads.
	Workload string
	// Concurrency is the number of callers, each with one request in
	// flight. Default 16.
	Concurrency int
	// Duration of the measured window. Default 10s.
	Duration time.Duration
	// Warmup runs the load unmeasured before the window. Zero: none.
	Warmup time.Duration
	// Target is leader (default) or any.
	Target Target
	// PayloadSize is the size of each job's payload in bytes.
	PayloadSize int
	// Conns is the number of clients (HTTP/2 connections per node) the
	// callers share, per endpoint with target any. Default 1; scale 8.
	Conns int
	// Leases each worker holds: heartbeat's callers, acquire's workers
	// (their capacity), the held leases of mixed, failover and expiry, and
	// each of scale's workers. Default 10.
	Leases int
	// Workers is the number of workers scale simulates, each holding
	// Leases leases. Default 100,000 (the server's bound).
	Workers int
	// HeapProfile, when set, is where scale writes the leader's heap
	// profile (after a forced GC) once the window is over.
	HeapProfile string
	// CPUProfile, when set, is where the bench writes its own CPU profile
	// over the measured window of the workloads that run callers in a
	// closed loop (acquire, heartbeat, status, job-cycle, mixed,
	// failover, fencing): what the client side of each operation costs.
	CPUProfile string
	// LeaderProfile, when set, is where the bench writes the leader's CPU
	// profile over the measured window, read from its /debug/pprof/profile
	// for the window's whole seconds (the servers need --pprof, and the
	// bench an admin token): where the servers' side of an operation goes.
	// For the workloads whose callers run in a closed loop against one
	// leader (acquire, heartbeat, status, job-cycle, mixed, fencing).
	LeaderProfile string
	// Held is the number of leases heartbeated on schedule during mixed and
	// failover. Default 10,000.
	Held int
	// Abandon is the number of leases expiry abandons at once. Default
	// 10,000.
	Abandon int
	// Jobs is the size of the pre-submitted pool of acquire and job-cycle;
	// zero sizes it from the rate measured during warmup.
	Jobs int
	// Submit adds the submit to each job-cycle.
	Submit bool
	// Unchained takes each job-cycle's job with an acquire call of its own,
	// instead of in the report that ends the previous cycle.
	Unchained bool
	// Unary heartbeats with one call each instead of a heartbeat stream per
	// worker (heartbeat, and the held leases of acquire, mixed, failover
	// and expiry): the path before streams, and the fallback.
	Unary bool
	// Shared carries the heartbeat workload's workers over one heartbeat
	// stream per client (Conns) instead of a stream each, as a process
	// hosting many workers can: each beat is still its own message,
	// answered on its own after the leader's check.
	Shared bool
	// Flood runs a hostile client beside job-cycle (flood.go): gzip bombs,
	// oversized bodies, hanging connections, ghost heartbeats, bad tokens.
	Flood bool
	// Rounds is the number of grants per job in fencing (each but the last
	// released and reported stale). Default 3.
	Rounds int
	// DrainTimeout bounds expiry's wait for the last expiry after the last
	// deadline. Default 60s.
	DrainTimeout time.Duration
	// KillAfter is when failover kills the leader, from the window's start.
	// Default half the Duration.
	KillAfter time.Duration
	// CallTimeout bounds each call's attempts (client.Config.CallTimeout).
	// Default 10s.
	CallTimeout time.Duration

	// Endpoints are the cluster's API addresses. With Cluster set they are
	// the cluster's.
	Endpoints []string
	// Token and TLS are the client's.
	Token string
	TLS   *tls.Config
	// Cluster is a cluster this package started: the servers' CPU is then
	// known and failover can kill the leader. Nil: an external cluster.
	Cluster *LocalCluster
	// Log receives progress lines. Nil: none.
	Log io.Writer
}

// withDefaults returns a copy with the defaults filled in, and checks it.
func (c Config) withDefaults() (Config, error) {
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
	if c.Target == "" {
		c.Target = TargetLeader
	}
	if c.Conns == 0 {
		c.Conns = 1
		if c.Workload == "scale" {
			c.Conns = 8
		}
	}
	if c.Workers == 0 {
		c.Workers = maxWorkers
	}
	if c.Leases == 0 {
		c.Leases = 10
	}
	if c.Held == 0 {
		c.Held = 10000
	}
	if c.Abandon == 0 {
		c.Abandon = 10000
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 60 * time.Second
	}
	if c.KillAfter == 0 {
		c.KillAfter = c.Duration / 2
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.Cluster != nil {
		c.Endpoints = c.Cluster.Endpoints()
	}
	c.Endpoints = slices.Clone(c.Endpoints)
	return c, c.validate()
}

func (c *Config) validate() error {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s %v: %s", ErrInvalidConfig, field, v, why)
	}
	switch {
	case !slices.Contains(Workloads, c.Workload):
		return bad("Workload", fmt.Sprintf("%q", c.Workload), fmt.Sprintf("one of %v", Workloads))
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return bad("Concurrency", c.Concurrency, "1..10000")
	case c.Duration < 100*time.Millisecond:
		return bad("Duration", c.Duration, "at least 100ms")
	case c.Warmup < 0:
		return bad("Warmup", c.Warmup, "negative")
	case c.Target != TargetLeader && c.Target != TargetAny:
		return bad("Target", fmt.Sprintf("%q", c.Target), "leader or any")
	case c.PayloadSize < 0 || c.PayloadSize > 256<<10:
		return bad("PayloadSize", c.PayloadSize, "0..262144 (the server's bound)")
	case c.Conns < 1 || c.Conns > 256:
		return bad("Conns", c.Conns, "1..256")
	case c.Leases < 1 || c.Leases > 256:
		return bad("Leases", c.Leases, "1..256 (one acquire grants at most 256)")
	case c.Workers < 1 || c.Workers > maxWorkers:
		return bad("Workers", c.Workers, fmt.Sprintf("1..%d (the server's bound on workers)", maxWorkers))
	case c.Held < 1 || c.Abandon < 1:
		return bad("Held/Abandon", fmt.Sprint(c.Held, "/", c.Abandon), "at least 1")
	case c.Jobs < 0:
		return bad("Jobs", c.Jobs, "negative")
	case c.Rounds < 2 || c.Rounds > 32:
		return bad("Rounds", c.Rounds, "2..32 (a job keeps 32 leases)")
	case c.KillAfter < 0 || c.KillAfter >= c.Duration:
		return bad("KillAfter", c.KillAfter, "inside the window")
	case len(c.Endpoints) == 0:
		return bad("Endpoints", c.Endpoints, "at least one")
	case c.CPUProfile != "" && (c.Workload == "expiry" || c.Workload == "scale"):
		return bad("CPUProfile", fmt.Sprintf("%q", c.CPUProfile), "not for expiry or scale, which run no callers in a closed loop")
	case c.LeaderProfile != "" && (c.Workload == "expiry" || c.Workload == "scale" || c.Workload == "failover"):
		return bad("LeaderProfile", fmt.Sprintf("%q", c.LeaderProfile), "not for expiry or scale, which run no callers in a closed loop, nor failover, which kills the leader")
	}
	if c.Workload == "failover" && c.Cluster == nil {
		return fmt.Errorf("%w: failover kills the leader process with SIGKILL, so the bench must own the servers: run it with --start 3", ErrNeedsLocalCluster)
	}
	if c.Workload == "scale" && c.Cluster == nil {
		return fmt.Errorf("%w: scale reads the leader's memory from /proc and restarts a follower, so the bench must own the servers: run it with --start 3", ErrNeedsLocalCluster)
	}
	return nil
}
