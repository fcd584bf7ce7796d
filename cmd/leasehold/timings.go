package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/cluster"
)

// configKey is one key an operator writes: in the TOML file ([section]
// key) and, when it has one, as a flag. field is the name
// cluster.Config.Validate gives it.
type configKey struct {
	field   string
	section string // "" for a top-level key
	key     string
	flag    string // "" when the key has no flag
}

// toml is the key as written in the file: "[raft] election_timeout".
func (k configKey) toml() string {
	if k.section == "" {
		return k.key
	}
	return "[" + k.section + "] " + k.key
}

// path is the key's dotted path, as toml.MetaData names it.
func (k configKey) path() string {
	if k.section == "" {
		return k.key
	}
	return k.section + "." + k.key
}

// timing is a configKey that is a duration: executor keys in seconds
// (fractions allowed), the others TOML duration strings. scaled: multiplied
// by --timing-scale.
type timing struct {
	configKey
	usage   string
	seconds func(*ServerConfig) *float64
	dur     func(*ServerConfig) *time.Duration
	scaled  bool
}

// timings are every timing of the file, each with its flag.
var timings = []timing{
	{configKey{"renew_seconds", "plugins.executor", "renew_seconds", "renew-seconds"}, "workers heartbeat this often, in seconds",
		func(c *ServerConfig) *float64 { return &c.Plugins.Executor.RenewSeconds }, nil, true},
	{configKey{"grace_seconds", "plugins.executor", "grace_seconds", "grace-seconds"}, "a worker silent this long is unreachable and gets no new lease, in seconds",
		func(c *ServerConfig) *float64 { return &c.Plugins.Executor.GraceSeconds }, nil, true},
	{configKey{"toleration_seconds", "plugins.executor", "toleration_seconds", "toleration-seconds"}, "a worker silent this long loses its leases, in seconds",
		func(c *ServerConfig) *float64 { return &c.Plugins.Executor.TolerationSeconds }, nil, true},
	{configKey{"worker_gc_seconds", "plugins.executor", "worker_gc_seconds", "worker-gc-seconds"}, "a worker silent this long and holding no lease is deregistered, in seconds",
		func(c *ServerConfig) *float64 { return &c.Plugins.Executor.WorkerGCSeconds }, nil, true},
	{configKey{"raft_heartbeat_timeout", "raft", "heartbeat_timeout", "raft-heartbeat-timeout"}, "a follower that hears no leader this long starts an election",
		nil, func(c *ServerConfig) *time.Duration { return &c.Raft.HeartbeatTimeout.Duration }, true},
	{configKey{"raft_election_timeout", "raft", "election_timeout", "raft-election-timeout"}, "a candidate that wins no election this long tries again; at most a quarter of grace",
		nil, func(c *ServerConfig) *time.Duration { return &c.Raft.ElectionTimeout.Duration }, true},
	{configKey{"raft_leader_lease_timeout", "raft", "leader_lease_timeout", "raft-leader-lease-timeout"}, "a leader that reaches no quorum this long steps down; at most the heartbeat timeout",
		nil, func(c *ServerConfig) *time.Duration { return &c.Raft.LeaderLeaseTimeout.Duration }, true},
	{configKey{"raft_commit_timeout", "raft", "commit_timeout", "raft-commit-timeout"}, "the longest a leader waits before it sends followers what it committed",
		nil, func(c *ServerConfig) *time.Duration { return &c.Raft.CommitTimeout.Duration }, true},
	{configKey{"dead_leader_after", "raft", "dead_leader_after", "raft-dead-leader-after"}, "a follower that hears no leader this long asks the other voters, and the best placed stands at once if a quorum has lost the leader too (0s: 1.5 x the heartbeat timeout; at least half of it; negative: never)",
		nil, func(c *ServerConfig) *time.Duration { return &c.Raft.DeadLeaderAfter.Duration }, true},
	{configKey{"snapshot_interval", "raft", "snapshot_interval", "raft-snapshot-interval"}, "how often a node checks whether to take a snapshot",
		nil, func(c *ServerConfig) *time.Duration { return &c.Raft.SnapshotInterval.Duration }, true},
	{configKey{"retention", "retention", "jobs", "retention-jobs"}, "finished jobs are kept this long",
		nil, func(c *ServerConfig) *time.Duration { return &c.Retention.Jobs.Duration }, false},
	{configKey{"event_retention", "retention", "events", "retention-events"}, "events are kept this long",
		nil, func(c *ServerConfig) *time.Duration { return &c.Retention.Events.Duration }, false},
	{configKey{"dead_retention", "retention", "dead_jobs", "retention-dead-jobs"}, "dead jobs wait this long to be retried, then are purged (0s: until then)",
		nil, func(c *ServerConfig) *time.Duration { return &c.Retention.DeadJobs.Duration }, false},
	{configKey{"compact_interval", "retention", "compact_interval", "retention-compact-interval"}, "how often the leader compacts",
		nil, func(c *ServerConfig) *time.Duration { return &c.Retention.CompactInterval.Duration }, false},
	{configKey{"body_timeout", "limits", "body_timeout", "body-timeout"}, "a request body must arrive within this",
		nil, func(c *ServerConfig) *time.Duration { return &c.Limits.BodyTimeout.Duration }, false},
}

// otherKeys are the other fields cluster.Config.Validate and the API's
// limits name, with the key an operator writes.
var otherKeys = []configKey{
	{"data_dir", "", "data_dir", "data-dir"},
	{"raft_bind", "", "raft_bind", "raft-bind"},
	{"raft_advertise", "", "raft_advertise", "raft-advertise"},
	{"api_addr", "", "api_advertise", "api-advertise"},
	{"bootstrap_expect", "", "bootstrap_expect", "bootstrap-expect"},
	{"join", "", "join", "join"},
	{"max_workers", "plugins.executor", "max_workers", ""},
	{"log_store", "raft", "log_store", ""},
	{"wal_segment_bytes", "raft", "wal_segment_bytes", ""},
	{"snapshot_threshold", "raft", "snapshot_threshold", ""},
	{"state_quota_bytes", "limits", "state_quota_bytes", ""},
	{"max_queued_per_submitter", "limits", "max_queued_per_submitter", ""},
}

// keyOfField maps a cluster.Config field name to the operator's key.
var keyOfField = func() map[string]configKey {
	m := map[string]configKey{}
	for _, t := range timings {
		m[t.field] = t.configKey
	}
	for _, k := range otherKeys {
		m[k.field] = k
	}
	return m
}()

// timingFlags are the flags of the timings, each showing its default.
func timingFlags(env func(string) []string) []cli.Flag {
	d := defaultServerConfig()
	var flags []cli.Flag
	for _, t := range timings {
		envName := strings.ToUpper(strings.ReplaceAll(t.flag, "-", "_"))
		usage := t.usage + " (TOML: " + t.toml() + ")"
		if t.scaled {
			usage += "; times --timing-scale"
		}
		if t.seconds != nil {
			flags = append(flags, &cli.Float64Flag{Name: t.flag, EnvVars: env(envName), Value: *t.seconds(&d), Usage: usage})
		} else {
			flags = append(flags, &cli.DurationFlag{Name: t.flag, EnvVars: env(envName), Value: *t.dur(&d), Usage: usage})
		}
	}
	return flags
}

// timingScaleFlag scales every liveness timing.
func timingScaleFlag(env []string) cli.Flag {
	return &cli.Float64Flag{Name: "timing-scale", EnvVars: env, Value: 1,
		Usage: fmt.Sprintf("multiply every liveness timing (renew, grace, toleration, worker GC, the Raft timeouts, the snapshot interval, the apply timeout), given or not, by this: 0.1 runs ten times faster (more than 0, at most %d); retention, compaction and body timeouts are not scaled", maxTimingScale)}
}

const maxTimingScale = 100

// setTimings applies the timing flags that were set, and marks them set.
func setTimings(c *cli.Context, cfg *ServerConfig) {
	for _, t := range timings {
		if !c.IsSet(t.flag) {
			continue
		}
		if t.seconds != nil {
			*t.seconds(cfg) = c.Float64(t.flag)
		} else {
			*t.dur(cfg) = c.Duration(t.flag)
		}
		cfg.markSet(t.path())
	}
}

func (c *ServerConfig) markSet(path string) {
	if c.set == nil {
		c.set = map[string]bool{}
	}
	c.set[path] = true
}

// fitTimings lowers or raises the timings the operator did not set (in
// the file or by flag) so they fit the ones set, keeping the defaults
// where they already fit: a lone --grace-seconds 2 brings renew down to
// grace / 5, a lone --grace-seconds 400 brings toleration up to 6 x grace,
// and the Raft timeouts stay within a quarter of grace. A timing the
// operator set is never changed; a conflict between set timings is left
// for validation to name.
func (c *ServerConfig) fitTimings() {
	set := func(section, key string) bool { return c.set[section+"."+key] }
	e := &c.Plugins.Executor
	const ex = "plugins.executor"
	if !set(ex, "grace_seconds") {
		if set(ex, "toleration_seconds") && e.GraceSeconds >= e.TolerationSeconds {
			e.GraceSeconds = e.TolerationSeconds / 6
		}
		if set(ex, "renew_seconds") && e.GraceSeconds <= e.RenewSeconds {
			e.GraceSeconds = 5 * e.RenewSeconds
		}
	}
	if !set(ex, "renew_seconds") && e.RenewSeconds >= e.GraceSeconds {
		e.RenewSeconds = e.GraceSeconds / 5
	}
	if !set(ex, "toleration_seconds") && (e.TolerationSeconds <= e.GraceSeconds || e.TolerationSeconds < 3*e.RenewSeconds) {
		e.TolerationSeconds = max(6*e.GraceSeconds, 3*e.RenewSeconds)
	}
	if !set(ex, "worker_gc_seconds") && e.WorkerGCSeconds < 2*e.TolerationSeconds {
		e.WorkerGCSeconds = 2 * e.TolerationSeconds
	}
	r := &c.Raft
	quarter := seconds(e.GraceSeconds) / 4
	if !set("raft", "election_timeout") {
		if set("raft", "heartbeat_timeout") {
			r.ElectionTimeout.Duration = max(r.ElectionTimeout.Duration, r.HeartbeatTimeout.Duration)
		}
		r.ElectionTimeout.Duration = min(r.ElectionTimeout.Duration, quarter)
	}
	if !set("raft", "heartbeat_timeout") {
		r.HeartbeatTimeout.Duration = min(r.HeartbeatTimeout.Duration, r.ElectionTimeout.Duration)
	}
	if !set("raft", "leader_lease_timeout") {
		r.LeaderLeaseTimeout.Duration = min(r.LeaderLeaseTimeout.Duration, r.HeartbeatTimeout.Duration)
	}
}

// scaleTimings multiplies the node's liveness timings by the scale. Every
// rule between them is a ratio, so a configuration valid at one scale is
// valid at another, down to Raft's own floors (5 ms, 1 ms for the commit
// timeout), which validation names.
func scaleTimings(cfg *cluster.Config, scale float64) {
	if scale == 1 {
		return
	}
	for _, d := range []*time.Duration{&cfg.Renew, &cfg.Grace, &cfg.Toleration, &cfg.WorkerGCThreshold,
		&cfg.HeartbeatTimeout, &cfg.ElectionTimeout, &cfg.LeaderLeaseTimeout, &cfg.CommitTimeout,
		&cfg.SnapshotInterval, &cfg.ApplyTimeout, &cfg.JoinRetry, &cfg.DeadLeaderAfter} {
		*d = time.Duration(float64(*d) * scale) // DeadLeaderAfter: its sign, zero or negative, stays
	}
}

// checkTimingScale accepts 0 < scale <= maxTimingScale.
func checkTimingScale(scale float64) error {
	if !(scale > 0 && scale <= maxTimingScale) {
		return fmt.Errorf("%w: --timing-scale %g: more than 0 and at most %d (0.1 runs ten times faster)", errUsage, scale, maxTimingScale)
	}
	return nil
}

// fieldWord is a cluster field name in a validation reason.
var fieldWord = regexp.MustCompile(`[a-z]+(_[a-z]+)+`)

// nameKeys rewrites a cluster.ConfigError to name the keys the operator
// writes ([raft] election_timeout) instead of the node's field names, and
// says which flags set them and what --timing-scale did.
func nameKeys(err error, scale float64) error {
	var ce *cluster.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	k, ok := keyOfField[ce.Field]
	if !ok {
		return err
	}
	flags := []string{}
	addFlag := func(k configKey) {
		if f := "--" + k.flag; k.flag != "" && !strings.Contains(strings.Join(flags, " "), f) {
			flags = append(flags, f)
		}
	}
	addFlag(k)
	reason := fieldWord.ReplaceAllStringFunc(ce.Reason, func(w string) string {
		if o, ok := keyOfField[w]; ok {
			addFlag(o)
			return o.toml()
		}
		return w
	})
	if len(flags) > 0 {
		reason += "; set by " + strings.Join(flags, " and ")
	}
	if scale != 1 {
		reason += fmt.Sprintf(" (values after --timing-scale %g)", scale)
	}
	return &cluster.ConfigError{Field: k.toml(), Value: ce.Value, Reason: reason}
}
