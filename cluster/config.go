package cluster

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
)

// Config is one node's configuration. DefaultConfig fills every field;
// Validate checks each field and the rules between them and never changes
// anything.
type Config struct {
	// NodeID is the node's stable id. Empty: read from DataDir/node-id, or
	// generated and written there on first start.
	NodeID string
	// DataDir holds the Raft log (raft.db), snapshots and the node id.
	DataDir string
	// RaftBind is the address the Raft port listens on (Raft and the
	// node-to-node RPC share it). RaftAdvertise is the address peers dial;
	// empty means the bound address.
	RaftBind      string
	RaftAdvertise string
	// APIAddr is the address clients reach this node's API on. It is
	// replicated so any node can point a client at the leader's API.
	APIAddr string
	// Version is this build's version, shown with the node's level in the
	// node table (optional).
	Version string
	// For tests (export_test.go): the level this node says it is at (0:
	// fsm.Level), as a node of an older build would, and how often the
	// leader asks (0: levelInterval).
	sayLevel   uint8
	levelEvery time.Duration
	// For tests: while it holds true, the node does not ask the leader to
	// refresh its node-table entry (membership.go).
	holdRefresh *atomic.Bool
	// For tests: called by the leader's AddNode once a claim is
	// confirmed, before it looks at the voters again.
	afterClaim func(id string)

	// BootstrapExpect is the number of voters to wait for before forming a
	// new cluster (3 or 5; 1 for a single-node development cluster; 0 never
	// bootstraps, the node only joins). Join lists peers' Raft addresses;
	// the same list on every node works on first boot and on restart.
	BootstrapExpect int
	Join            []string
	// JoinRetry is how often a node that is in no cluster retries.
	JoinRetry time.Duration

	// The executor timings of SPEC section 4.
	Renew      time.Duration // a worker heartbeats this often
	Grace      time.Duration // silent this long: unreachable, no new lease
	Toleration time.Duration // silent this long: its leases expire
	// WorkerGCThreshold: a registered worker the leader has not heard from
	// for this long, holding no lease, is deregistered by the leader (one
	// worker.deregistered event). It registers again when it comes back
	// (the client does so on UNKNOWN_WORKER). At least 2 x Toleration.
	WorkerGCThreshold time.Duration
	// MaxWorkers bounds the registered workers: a registration of a new
	// worker beyond it is refused (fsm.ErrTooLarge). At most
	// fsm.MaxWorkers, the state machine's own bound; lower it to what the
	// deployment runs, so a leaked worker credential cannot fill the table.
	MaxWorkers int

	// Raft timings.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// DeadLeaderAfter is how long a follower goes without hearing a leader
	// before it asks the other voters whether they have lost it too, and
	// stands at once if a quorum has (deadleader.go). Zero: 1.5 ×
	// HeartbeatTimeout; negative: never (Raft's own timers alone).
	DeadLeaderAfter time.Duration
	// Snapshots: every SnapshotInterval, if SnapshotThreshold entries were
	// written since the last; TrailingLogs entries stay after a snapshot;
	// SnapshotRetain snapshots are kept on disk. A node that starts reads
	// every entry after its newest snapshot twice before it serves (its
	// storage check, then Raft's search for configurations), and applies
	// them after: the interval (Raft waits between one and two of them)
	// bounds that log under load. 30 s rather than Raft's 120 s: a
	// follower restarted with a million jobs, after 3 minutes of writes
	// at 1,300 entries a second, spent 6 of its 12 s to ready reading
	// those entries.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotRetain    int

	// StateQuotaBytes bounds the replicated state's size (fsm
	// Stats.Bytes): submits past it are refused (0: no quota).
	// MaxQueuedPerSubmitter bounds one submitter's queued jobs (0: none).
	StateQuotaBytes       int64
	MaxQueuedPerSubmitter int

	// ApplyTimeout bounds a proposal when the caller's context has no
	// deadline.
	ApplyTimeout time.Duration
	// Retention keeps finished jobs this long, EventRetention events,
	// DeadRetention dead jobs (they wait to be retried or purged; zero
	// keeps them until then); CompactInterval is how often the leader
	// compacts.
	Retention       time.Duration
	EventRetention  time.Duration
	DeadRetention   time.Duration
	CompactInterval time.Duration
	// ScheduleGrace is how late a schedule's slot may fire under the
	// missed-slot policy skip: a slot further in the past when the leader
	// settles it (no leader ran the schedules at its time) was missed.
	ScheduleGrace time.Duration

	// LogStore is where the Raft log and stable store live: LogStoreWAL
	// (one fsync per append) or LogStoreBoltDB (two). A data dir keeps the
	// kind it was created with.
	LogStore string
	// WALSegmentBytes is the size of the WAL's segment files, each taken
	// on the disk when created (LogStoreWAL only).
	WALSegmentBytes int

	// Seams. RaftTLS and RaftClientTLS turn on TLS (mutual when the server
	// config requires client certificates) on the Raft port. Listener, if
	// set, is used instead of listening on RaftBind; Dial replaces the
	// default dialer. Clock is the time the expiry table runs on.
	RaftTLS       *tls.Config
	RaftClientTLS *tls.Config
	Listener      net.Listener
	Dial          transport.Dialer
	Clock         Clock
	Logger        hclog.Logger
	// WrapStores, if set, wraps raft.db's log and stable store, beneath
	// the node's own wrappers: tests inject disk errors through it.
	WrapStores func(raft.LogStore, raft.StableStore) (raft.LogStore, raft.StableStore)
}

// DefaultConfig returns a complete configuration with SPEC's executor
// timings (10 s / 50 s / 300 s) and Raft timeouts of 300 ms (heartbeat,
// election, leader lease), which with pre-vote elect a new leader well
// inside a second (docs/performance.md). The leader lease is as long as
// the heartbeat timeout: it only decides when a leader that cannot reach a
// quorum steps down (reads and heartbeats are confirmed by a quorum check
// either way), and at 150 ms a leader with a million leases, busy
// collecting garbage on a shared machine, stepped down over and over.
// Callers set at least DataDir, RaftBind and APIAddr.
func DefaultConfig() Config {
	return Config{
		JoinRetry:          time.Second,
		Renew:              10 * time.Second,
		Grace:              50 * time.Second,
		Toleration:         300 * time.Second,
		WorkerGCThreshold:  time.Hour,
		MaxWorkers:         fsm.MaxWorkers,
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 300 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
		SnapshotInterval:   30 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
		SnapshotRetain:     2,
		StateQuotaBytes:    2 << 30,
		LogStore:           LogStoreWAL,
		WALSegmentBytes:    64 << 20,
		ApplyTimeout:       10 * time.Second,
		Retention:          24 * time.Hour,
		EventRetention:     24 * time.Hour,
		DeadRetention:      7 * 24 * time.Hour,
		CompactInterval:    time.Minute,
		ScheduleGrace:      time.Minute,
		Clock:              SystemClock(),
		Logger:             hclog.NewNullLogger(),
	}
}

// ConfigError names the field that failed validation.
type ConfigError struct {
	Field  string
	Value  any
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("invalid config: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Unwrap makes every ConfigError match ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Validate checks every field and the rules between them. It never
// modifies the config.
func (c *Config) Validate() error {
	bad := func(field string, v any, format string, args ...any) error {
		return &ConfigError{Field: field, Value: v, Reason: fmt.Sprintf(format, args...)}
	}
	if c.DataDir == "" {
		return bad("data_dir", c.DataDir, "must be set")
	}
	if c.Listener == nil {
		if _, _, err := net.SplitHostPort(c.RaftBind); err != nil {
			return bad("raft_bind", c.RaftBind, "not host:port: %v", err)
		}
	}
	if c.RaftAdvertise != "" {
		if err := checkDialable(c.RaftAdvertise); err != nil {
			return bad("raft_advertise", c.RaftAdvertise, "%v", err)
		}
	}
	if err := checkDialable(c.APIAddr); err != nil {
		return bad("api_addr", c.APIAddr, "%v", err)
	}
	if isUnspecified(c.APIAddr) {
		// It is the address clients and followers are sent to.
		return bad("api_addr", c.APIAddr, "set an address clients can reach (api_advertise)")
	}
	switch c.BootstrapExpect {
	case 0, 1, 3, 5:
	default:
		return bad("bootstrap_expect", c.BootstrapExpect, "must be 0, 1, 3 or 5")
	}
	if c.BootstrapExpect > 1 && (len(c.Join) < c.BootstrapExpect-1 || len(c.Join) > c.BootstrapExpect) {
		return bad("join", c.Join, "bootstrap_expect %d needs the other %d nodes' Raft addresses (this node's own may be listed too)",
			c.BootstrapExpect, c.BootstrapExpect-1)
	}
	for _, p := range c.Join {
		if err := checkDialable(p); err != nil {
			return bad("join", p, "%v", err)
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"join_retry", c.JoinRetry}, {"renew_seconds", c.Renew}, {"grace_seconds", c.Grace},
		{"toleration_seconds", c.Toleration}, {"raft_heartbeat_timeout", c.HeartbeatTimeout},
		{"raft_election_timeout", c.ElectionTimeout}, {"raft_leader_lease_timeout", c.LeaderLeaseTimeout},
		{"raft_commit_timeout", c.CommitTimeout}, {"snapshot_interval", c.SnapshotInterval},
		{"apply_timeout", c.ApplyTimeout}, {"retention", c.Retention}, {"event_retention", c.EventRetention},
		{"compact_interval", c.CompactInterval}, {"worker_gc_seconds", c.WorkerGCThreshold},
		{"schedule_grace", c.ScheduleGrace},
	} {
		if d.v <= 0 {
			return bad(d.field, d.v, "must be positive")
		}
	}
	// hashicorp/raft's own floors, named here rather than by raft.
	for _, d := range []struct {
		field      string
		v, atLeast time.Duration
	}{
		{"raft_heartbeat_timeout", c.HeartbeatTimeout, 5 * time.Millisecond},
		{"raft_election_timeout", c.ElectionTimeout, 5 * time.Millisecond},
		{"raft_leader_lease_timeout", c.LeaderLeaseTimeout, 5 * time.Millisecond},
		{"raft_commit_timeout", c.CommitTimeout, time.Millisecond},
		{"snapshot_interval", c.SnapshotInterval, 5 * time.Millisecond},
	} {
		if d.v < d.atLeast {
			return bad(d.field, d.v, "must be at least %s (Raft's floor)", d.atLeast)
		}
	}
	if c.DeadRetention < 0 {
		return bad("dead_retention", c.DeadRetention, "must not be negative (0 keeps dead jobs until they are retried or purged)")
	}
	// SPEC section 4: the three executor timings.
	if c.Renew >= c.Grace {
		return bad("renew_seconds", c.Renew, "must be less than grace_seconds (%s)", c.Grace)
	}
	if c.Grace >= c.Toleration {
		return bad("grace_seconds", c.Grace, "must be less than toleration_seconds (%s)", c.Toleration)
	}
	if c.Toleration < 3*c.Renew {
		return bad("toleration_seconds", c.Toleration, "must be at least 3 x renew_seconds (%s)", 3*c.Renew)
	}
	// A failover must finish well inside grace, or workers would be marked
	// unreachable by an election. "Well under": a quarter.
	if 4*c.ElectionTimeout > c.Grace {
		return bad("raft_election_timeout", c.ElectionTimeout, "must be at most a quarter of grace_seconds (%s)", c.Grace)
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		return bad("raft_election_timeout", c.ElectionTimeout, "must be at least raft_heartbeat_timeout (%s)", c.HeartbeatTimeout)
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return bad("raft_leader_lease_timeout", c.LeaderLeaseTimeout, "must be at most raft_heartbeat_timeout (%s)", c.HeartbeatTimeout)
	}
	// A leader sends heartbeats every tenth of the timeout: a shorter
	// silence than half of it would be read as a dead leader.
	if c.DeadLeaderAfter > 0 && c.DeadLeaderAfter < c.HeartbeatTimeout/2 {
		return bad("dead_leader_after", c.DeadLeaderAfter, "must be at least half of raft_heartbeat_timeout (%s)", c.HeartbeatTimeout)
	}
	// Far past toleration: a worker is removed long after its leases
	// would have expired, never as part of a failover or a short outage.
	if c.WorkerGCThreshold < 2*c.Toleration {
		return bad("worker_gc_seconds", c.WorkerGCThreshold, "must be at least 2 x toleration_seconds (%s)", 2*c.Toleration)
	}
	if c.MaxWorkers < 1 || c.MaxWorkers > fsm.MaxWorkers {
		return bad("max_workers", c.MaxWorkers, "must be 1 to %d", fsm.MaxWorkers)
	}
	if c.LogStore != LogStoreWAL && c.LogStore != LogStoreBoltDB {
		return bad("log_store", c.LogStore, "%q or %q", LogStoreWAL, LogStoreBoltDB)
	}
	if c.LogStore == LogStoreWAL && (c.WALSegmentBytes < 1<<20 || c.WALSegmentBytes > 1<<30) {
		return bad("wal_segment_bytes", c.WALSegmentBytes, "between 1 MiB and 1 GiB")
	}
	if c.StateQuotaBytes < 0 || c.StateQuotaBytes > 0 && c.StateQuotaBytes < 1<<20 {
		return bad("state_quota_bytes", c.StateQuotaBytes, "0 (no quota) or at least 1 MiB")
	}
	if c.MaxQueuedPerSubmitter < 0 {
		return bad("max_queued_per_submitter", c.MaxQueuedPerSubmitter, "must not be negative")
	}
	if c.SnapshotRetain < 1 {
		return bad("snapshot_retain", c.SnapshotRetain, "must be at least 1")
	}
	if c.SnapshotThreshold == 0 || c.TrailingLogs == 0 {
		return bad("snapshot_threshold", c.SnapshotThreshold, "threshold and trailing logs (%d) must be positive", c.TrailingLogs)
	}
	if c.Clock == nil || c.Logger == nil {
		return bad("clock", c.Clock, "clock and logger must be set (DefaultConfig sets both)")
	}
	return nil
}

// checkDialable accepts host:port with a non-zero port.
func checkDialable(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" || port == "" || port == "0" {
		return fmt.Errorf("%q needs a host and a non-zero port", addr)
	}
	return nil
}
