package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/api"
	"github.com/leasehold/leasehold/transport"
	"github.com/leasehold/leasehold/transport/rules"
)

// ServerConfig is the server's configuration as an operator writes it
// (leasehold.example.toml documents every key). Flags and LEASEHOLD_*
// environment variables override the file.
type ServerConfig struct {
	// ClusterName is the cluster every peer certificate must name
	// (leasehold://<cluster>/server/<node-id>).
	ClusterName     string   `toml:"cluster_name"`
	NodeID          string   `toml:"node_id"`
	DataDir         string   `toml:"data_dir"`
	RaftBind        string   `toml:"raft_bind"`
	RaftAdvertise   string   `toml:"raft_advertise"`
	APIBind         string   `toml:"api_bind"`
	APIAdvertise    string   `toml:"api_advertise"`
	BootstrapExpect int      `toml:"bootstrap_expect"`
	Join            []string `toml:"join"`
	LogLevel        string   `toml:"log_level"`
	// LogJSON writes one JSON object per log line (for log shippers).
	LogJSON bool `toml:"log_json"`
	// Insecure starts a node that binds or advertises a non-loopback
	// address without peer mutual TLS and API authentication.
	Insecure bool `toml:"insecure"`

	Raft      RaftSection      `toml:"raft"`
	Retention RetentionSection `toml:"retention"`
	TLS       TLSSection       `toml:"tls"`
	Auth      AuthSection      `toml:"auth"`
	Limits    LimitsSection    `toml:"limits"`
	Debug     DebugSection     `toml:"debug"`
	Plugins   struct {
		Executor ExecutorSection `toml:"executor"`
	} `toml:"plugins"`

	// Sockets inherited from the process that started this one (--raft-fd,
	// --api-fd), used instead of binding RaftBind and APIBind; nil when not.
	raftListener, apiListener net.Listener
	// set holds the dotted keys the file or a flag set
	// ("raft.election_timeout"): fitTimings fits the others around them.
	set map[string]bool
	// timingScale multiplies the liveness timings (--timing-scale; 0: 1).
	timingScale float64
}

// ExecutorSection is [plugins.executor]: SPEC section 4's timings, in
// seconds (fractions allowed).
type ExecutorSection struct {
	RenewSeconds      float64 `toml:"renew_seconds"`
	GraceSeconds      float64 `toml:"grace_seconds"`
	TolerationSeconds float64 `toml:"toleration_seconds"`
	WorkerGCSeconds   float64 `toml:"worker_gc_seconds"`
	MaxWorkers        int     `toml:"max_workers"`
}

type RaftSection struct {
	// LogStore is "wal" or "boltdb" (cluster.LogStore*); WALSegmentBytes
	// the WAL's segment size.
	LogStore           string   `toml:"log_store"`
	WALSegmentBytes    int      `toml:"wal_segment_bytes"`
	HeartbeatTimeout   duration `toml:"heartbeat_timeout"`
	ElectionTimeout    duration `toml:"election_timeout"`
	LeaderLeaseTimeout duration `toml:"leader_lease_timeout"`
	CommitTimeout      duration `toml:"commit_timeout"`
	// DeadLeaderAfter: a follower that hears no leader this long asks the
	// other voters and stands at once if a quorum agrees; zero is 1.5 ×
	// heartbeat_timeout, negative never (cluster.Config.DeadLeaderAfter).
	DeadLeaderAfter   duration `toml:"dead_leader_after"`
	SnapshotInterval  duration `toml:"snapshot_interval"`
	SnapshotThreshold uint64   `toml:"snapshot_threshold"`
	TrailingLogs      uint64   `toml:"trailing_logs"`
}

type RetentionSection struct {
	Jobs            duration `toml:"jobs"`
	Events          duration `toml:"events"`
	DeadJobs        duration `toml:"dead_jobs"`
	CompactInterval duration `toml:"compact_interval"`
}

// TLSSection is [tls]: one configuration per port.
type TLSSection struct {
	// Peer is the Raft and node-to-node port: mutual TLS, every connection
	// presents a certificate from the CA naming a server of this cluster.
	Peer TLSFiles `toml:"peer"`
	// API is the public port: a server certificate; client certificates
	// verified against ca_file when presented, required with
	// verify_clients.
	API TLSFiles `toml:"api"`
}

// TLSFiles is one port's PEM files.
type TLSFiles struct {
	CertFile      string `toml:"cert_file"`
	KeyFile       string `toml:"key_file"`
	CAFile        string `toml:"ca_file"`
	VerifyClients bool   `toml:"verify_clients"` // [tls.api] only
}

func (f TLSFiles) set() bool {
	return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" || f.VerifyClients
}

func (f TLSFiles) files() transport.TLSFiles {
	return transport.TLSFiles{CertFile: f.CertFile, KeyFile: f.KeyFile, CAFile: f.CAFile}
}

// AuthSection is [auth]: bearer tokens and client certificates' roles.
type AuthSection struct {
	Tokens []TokenEntry `toml:"tokens"`
	Certs  []CertEntry  `toml:"certs"`
}

// TokenEntry is one [[auth.tokens]]: a secret (inline, in a file, or in an
// environment variable), the name it is audited under, its role, and whom
// it may act as.
type TokenEntry struct {
	Name      string `toml:"name"`
	Token     string `toml:"token"`
	TokenFile string `toml:"token_file"`
	TokenEnv  string `toml:"token_env"`
	ScopeEntry
}

// ScopeEntry is a credential's role and whom it may act as: a worker
// credential names its worker ids (exact, or a prefix ending in '*'; "*"
// for any), a submitter credential its submitter ("*" for any).
type ScopeEntry struct {
	Role      string   `toml:"role"`
	Workers   []string `toml:"workers"`
	Submitter string   `toml:"submitter"`
}

// CertEntry is one [[auth.certs]]: the grant of the client certificate
// whose identity name (or common name) is Name.
type CertEntry struct {
	Name string `toml:"name"`
	ScopeEntry
}

// DebugSection is [debug]: what a node shows about its own running.
type DebugSection struct {
	// Pprof serves Go's profiles at /debug/pprof/ to admin credentials.
	Pprof bool `toml:"pprof"`
	// HeapDump serves a dump of the heap at /debug/heapdump to admin
	// credentials (with authentication off, to callers on the node's own
	// host only). The dump holds every secret the node holds.
	HeapDump bool `toml:"heap_dump"`
}

// LimitsSection is [limits]: what one caller can make a node do, and the
// replicated state's quota.
type LimitsSection struct {
	MaxRequestBytes       int      `toml:"max_request_bytes"`
	MaxConnections        int      `toml:"max_connections"`
	MaxConnectionsPerHost int      `toml:"max_connections_per_host"`
	RatePerCredential     float64  `toml:"rate_per_credential"`
	BurstPerCredential    int      `toml:"burst_per_credential"`
	BodyTimeout           duration `toml:"body_timeout"`
	StateQuotaBytes       int64    `toml:"state_quota_bytes"`
	MaxQueuedPerSubmitter int      `toml:"max_queued_per_submitter"`
}

// duration is a TOML string like "1s".
type duration struct{ time.Duration }

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// defaultServerConfig mirrors cluster.DefaultConfig for the file's keys.
func defaultServerConfig() ServerConfig {
	d := cluster.DefaultConfig()
	var c ServerConfig
	c.DataDir = "/var/lib/leasehold"
	c.RaftBind = "0.0.0.0:7711"
	c.APIBind = "0.0.0.0:7701"
	c.LogLevel = "info"
	c.ClusterName = transport.DefaultClusterName
	c.Raft = RaftSection{
		LogStore: d.LogStore, WALSegmentBytes: d.WALSegmentBytes,
		HeartbeatTimeout: duration{d.HeartbeatTimeout}, ElectionTimeout: duration{d.ElectionTimeout},
		LeaderLeaseTimeout: duration{d.LeaderLeaseTimeout}, CommitTimeout: duration{d.CommitTimeout},
		SnapshotInterval:  duration{d.SnapshotInterval},
		SnapshotThreshold: d.SnapshotThreshold, TrailingLogs: d.TrailingLogs,
	}
	c.Retention = RetentionSection{Jobs: duration{d.Retention}, Events: duration{d.EventRetention}, DeadJobs: duration{d.DeadRetention},
		CompactInterval: duration{d.CompactInterval}}
	l := api.DefaultLimits()
	c.Limits = LimitsSection{
		MaxRequestBytes: l.MaxRequestBytes, MaxConnections: l.MaxConns, MaxConnectionsPerHost: l.MaxConnsPerHost,
		RatePerCredential: l.Rate, BurstPerCredential: l.Burst, BodyTimeout: duration{l.BodyTimeout},
		StateQuotaBytes: d.StateQuotaBytes, MaxQueuedPerSubmitter: d.MaxQueuedPerSubmitter,
	}
	c.Plugins.Executor = ExecutorSection{
		RenewSeconds: d.Renew.Seconds(), GraceSeconds: d.Grace.Seconds(), TolerationSeconds: d.Toleration.Seconds(),

		WorkerGCSeconds: d.WorkerGCThreshold.Seconds(), MaxWorkers: d.MaxWorkers,
	}
	return c
}

// loadConfigFile decodes a TOML file strictly: an unknown key is an error
// that names it.
func loadConfigFile(path string, into *ServerConfig) error {
	_, err := decodeConfigFile(path, into)
	return err
}

// decodeConfigFile is loadConfigFile, and returns the dotted keys the file
// sets.
func decodeConfigFile(path string, into *ServerConfig) ([]string, error) {
	md, err := toml.DecodeFile(path, into)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		keys := make([]string, len(undecoded))
		for i, k := range undecoded {
			keys[i] = k.String()
		}
		hint := ""
		for _, k := range keys {
			if strings.HasPrefix(k, "tls.") && !strings.HasPrefix(k, "tls.peer.") && !strings.HasPrefix(k, "tls.api.") {
				hint = " ([tls] has one section per port: [tls.peer] and [tls.api])"
			}
		}
		return nil, fmt.Errorf("config %s: unknown key %s%s", path, strings.Join(keys, ", "), hint)
	}
	var set []string
	for _, k := range md.Keys() {
		set = append(set, k.String())
	}
	return set, nil
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// clusterConfig turns the operator's configuration into the node's, and
// validates it; an error names the TOML key and the flag. The timings the
// operator did not set are fitted to those set (fitTimings), then the
// liveness timings are scaled by --timing-scale. The peer TLS material it
// loads is returned for reloading.
func (c *ServerConfig) clusterConfig(logger hclog.Logger) (cluster.Config, *transport.TLSMaterial, error) {
	cfg, peer, err := c.clusterConfigOf(logger)
	return cfg, peer, nameKeys(err, c.scale())
}

// scale is the timing scale (1 when unset).
func (c *ServerConfig) scale() float64 {
	if c.timingScale == 0 {
		return 1
	}
	return c.timingScale
}

func (c *ServerConfig) clusterConfigOf(logger hclog.Logger) (cluster.Config, *transport.TLSMaterial, error) {
	cfg := cluster.DefaultConfig()
	if err := checkTimingScale(c.scale()); err != nil {
		return cfg, nil, err
	}
	fitted := *c
	fitted.fitTimings()
	cfg.NodeID, cfg.DataDir = c.NodeID, c.DataDir
	cfg.RaftBind, cfg.RaftAdvertise, cfg.Listener = c.RaftBind, c.RaftAdvertise, c.raftListener
	cfg.APIAddr = c.APIAdvertise
	if cfg.APIAddr == "" {
		cfg.APIAddr = c.APIBind
	}
	cfg.BootstrapExpect, cfg.Join = c.BootstrapExpect, c.Join
	if rules.CheckVersion("version", version) == nil {
		cfg.Version = version // shown with the node's level in the node table
	}
	e := fitted.Plugins.Executor
	cfg.Renew, cfg.Grace, cfg.Toleration = seconds(e.RenewSeconds), seconds(e.GraceSeconds), seconds(e.TolerationSeconds)
	cfg.WorkerGCThreshold, cfg.MaxWorkers = seconds(e.WorkerGCSeconds), e.MaxWorkers
	r := fitted.Raft
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = r.HeartbeatTimeout.Duration, r.ElectionTimeout.Duration
	cfg.LeaderLeaseTimeout, cfg.CommitTimeout = r.LeaderLeaseTimeout.Duration, r.CommitTimeout.Duration
	cfg.DeadLeaderAfter = r.DeadLeaderAfter.Duration
	cfg.LogStore, cfg.WALSegmentBytes = c.Raft.LogStore, c.Raft.WALSegmentBytes
	cfg.SnapshotInterval, cfg.SnapshotThreshold, cfg.TrailingLogs = c.Raft.SnapshotInterval.Duration, c.Raft.SnapshotThreshold, c.Raft.TrailingLogs
	cfg.Retention, cfg.EventRetention, cfg.CompactInterval = c.Retention.Jobs.Duration, c.Retention.Events.Duration, c.Retention.CompactInterval.Duration
	cfg.DeadRetention = c.Retention.DeadJobs.Duration
	cfg.StateQuotaBytes, cfg.MaxQueuedPerSubmitter = c.Limits.StateQuotaBytes, c.Limits.MaxQueuedPerSubmitter
	scaleTimings(&cfg, c.scale())
	cfg.Logger = logger
	cfg.Clock = serverClock()
	if c.Limits.BodyTimeout.Duration < 0 {
		return cfg, nil, &cluster.ConfigError{Field: "body_timeout", Value: c.Limits.BodyTimeout.Duration, Reason: "must not be negative (0: no bound)"}
	}
	if err := c.apiLimits().Validate(); err != nil {
		return cfg, nil, err
	}
	if err := transport.CheckClusterName(c.ClusterName); err != nil {
		return cfg, nil, &cluster.ConfigError{Field: "cluster_name", Value: c.ClusterName, Reason: err.Error()}
	}
	var peer *transport.TLSMaterial
	if c.TLS.Peer.set() {
		if c.TLS.Peer.VerifyClients {
			return cfg, nil, &cluster.ConfigError{Field: "tls.peer.verify_clients", Value: true, Reason: "the peer port always verifies: remove the key"}
		}
		var err error
		if peer, err = transport.LoadTLS(c.TLS.Peer.files()); err != nil {
			return cfg, nil, &cluster.ConfigError{Field: "tls.peer", Value: c.TLS.Peer.CertFile, Reason: err.Error()}
		}
		server, client, err := peer.PeerConfigs(c.ClusterName)
		if err != nil {
			return cfg, nil, &cluster.ConfigError{Field: "tls.peer.ca_file", Value: c.TLS.Peer.CAFile, Reason: err.Error()}
		}
		cfg.RaftTLS, cfg.RaftClientTLS = server, client
	}
	if _, err := c.credentials(); err != nil {
		return cfg, nil, err
	}
	if !slices.Contains([]string{"trace", "debug", "info", "warn", "error"}, c.LogLevel) {
		return cfg, nil, &cluster.ConfigError{Field: "log_level", Value: c.LogLevel, Reason: "one of trace, debug, info, warn, error"}
	}
	if c.APIBind == "" {
		return cfg, nil, &cluster.ConfigError{Field: "api_bind", Value: c.APIBind, Reason: "must be set"}
	}
	if err := c.checkExposure(); err != nil {
		return cfg, nil, err
	}
	return cfg, peer, cfg.Validate()
}

// apiLimits are [limits]' bounds on callers.
// A zero value is no bound.
func (c *ServerConfig) apiLimits() api.Limits {
	l, d := c.Limits, api.DefaultLimits()
	return api.Limits{
		MaxRequestBytes: l.MaxRequestBytes, MaxConns: l.MaxConnections, MaxConnsPerHost: l.MaxConnectionsPerHost,
		Rate: l.RatePerCredential, Burst: l.BurstPerCredential, BodyTimeout: l.BodyTimeout.Duration,
		HeaderTimeout: d.HeaderTimeout, IdleTimeout: d.IdleTimeout, WriteTimeout: d.WriteTimeout,
	}
}

// apiTLS loads the API port's TLS material and configuration; nil without
// [tls.api].
func (c *ServerConfig) apiTLS() (*transport.TLSMaterial, *tls.Config, error) {
	a := c.TLS.API
	if !a.set() {
		return nil, nil, nil
	}
	mat, err := transport.LoadTLS(a.files())
	if err != nil {
		return nil, nil, &cluster.ConfigError{Field: "tls.api", Value: a.CertFile, Reason: err.Error()}
	}
	policy := transport.ClientCertNone
	switch {
	case a.VerifyClients:
		policy = transport.ClientCertRequired
	case a.CAFile != "":
		policy = transport.ClientCertOptional
	}
	conf, err := mat.APIServerConfig(policy)
	if err != nil {
		return nil, nil, &cluster.ConfigError{Field: "tls.api.verify_clients", Value: a.VerifyClients, Reason: err.Error()}
	}
	return mat, conf, nil
}

// credentials are the API's tokens and certificate grants. Token secrets
// are never echoed back, not even a bad one.
func (c *ServerConfig) credentials() (api.Credentials, error) {
	out := api.Credentials{RequireClientCerts: c.TLS.API.VerifyClients}
	names := map[string]bool{}
	for i, t := range c.Auth.Tokens {
		field := fmt.Sprintf("auth.tokens[%d]", i)
		g, err := t.grant(field)
		if err != nil {
			return out, err
		}
		secret, err := t.secret(field)
		if err != nil {
			return out, err
		}
		name := t.Name
		if name == "" {
			name = fmt.Sprintf("%s-%d", t.Role, i+1)
		}
		if names[name] {
			return out, &cluster.ConfigError{Field: field + ".name", Value: name, Reason: "another token has this name"}
		}
		names[name] = true
		out.Tokens = append(out.Tokens, api.Token{Name: name, Secret: secret, Grant: g})
	}
	for i, ce := range c.Auth.Certs {
		field := fmt.Sprintf("auth.certs[%d]", i)
		g, err := ce.grant(field)
		if err != nil {
			return out, err
		}
		if ce.Name == "" {
			return out, &cluster.ConfigError{Field: field + ".name", Value: "", Reason: "name the certificate (its identity name or common name)"}
		}
		out.Certs = append(out.Certs, api.CertRole{Name: ce.Name, Grant: g})
	}
	if len(out.Certs) > 0 && c.TLS.API.CAFile == "" {
		return out, &cluster.ConfigError{Field: "auth.certs", Value: len(out.Certs), Reason: "client certificates need [tls.api] ca_file"}
	}
	return out, nil
}

// secret reads the token from exactly one of token, token_file and
// token_env. A file must not be readable by others.
func (t TokenEntry) secret(field string) (string, error) {
	set := 0
	for _, v := range []string{t.Token, t.TokenFile, t.TokenEnv} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return "", &cluster.ConfigError{Field: field, Value: "(hidden)", Reason: "set exactly one of token, token_file and token_env"}
	}
	secret := t.Token
	switch {
	case t.TokenFile != "":
		info, err := os.Stat(t.TokenFile)
		if err != nil {
			return "", &cluster.ConfigError{Field: field + ".token_file", Value: t.TokenFile, Reason: err.Error()}
		}
		if info.Mode().Perm()&0o077 != 0 {
			return "", &cluster.ConfigError{Field: field + ".token_file", Value: t.TokenFile,
				Reason: fmt.Sprintf("mode %04o: readable by others (chmod 600)", info.Mode().Perm())}
		}
		b, err := os.ReadFile(t.TokenFile)
		if err != nil {
			return "", &cluster.ConfigError{Field: field + ".token_file", Value: t.TokenFile, Reason: err.Error()}
		}
		secret = strings.TrimSpace(string(b))
	case t.TokenEnv != "":
		secret = os.Getenv(t.TokenEnv)
		if secret == "" {
			return "", &cluster.ConfigError{Field: field + ".token_env", Value: t.TokenEnv, Reason: "the variable is empty or unset"}
		}
	}
	if len(secret) < 16 {
		return "", &cluster.ConfigError{Field: field + ".token", Value: "(hidden)", Reason: "at least 16 characters"}
	}
	return secret, nil
}

// grant checks a role and its scope: a worker credential names the workers
// it may act as, a submitter credential its submitter, and nothing else
// has either.
func (e ScopeEntry) grant(field string) (api.Grant, error) {
	role, err := parseRole(field+".role", e.Role)
	if err != nil {
		return api.Grant{}, err
	}
	g := api.Grant{Role: role, Workers: e.Workers, Submitter: e.Submitter}
	switch {
	case role == api.RoleWorker && len(e.Workers) == 0:
		return g, &cluster.ConfigError{Field: field + ".workers", Value: "[]", Reason: `name the worker ids this credential may act as (exact, a prefix ending in "*", or ["*"] for any)`}
	case role == api.RoleSubmitter && e.Submitter == "":
		return g, &cluster.ConfigError{Field: field + ".submitter", Value: "", Reason: `name the submitter this credential acts as ("*" for any)`}
	case role != api.RoleWorker && len(e.Workers) > 0:
		return g, &cluster.ConfigError{Field: field + ".workers", Value: e.Workers, Reason: "only a worker credential names workers"}
	case role != api.RoleSubmitter && e.Submitter != "":
		return g, &cluster.ConfigError{Field: field + ".submitter", Value: e.Submitter, Reason: "only a submitter credential names a submitter"}
	}
	for _, w := range e.Workers {
		if w == "" || strings.Contains(strings.TrimSuffix(w, "*"), "*") {
			return g, &cluster.ConfigError{Field: field + ".workers", Value: w, Reason: `an id, or a prefix ending in "*"`}
		}
	}
	return g, nil
}

func parseRole(field, s string) (api.Role, error) {
	switch role := api.Role(s); role {
	case api.RoleAdmin, api.RoleSubmitter, api.RoleWorker:
		return role, nil
	}
	return "", &cluster.ConfigError{Field: field, Value: s, Reason: "one of admin, submitter, worker"}
}

// checkExposure refuses to run a node reachable from other hosts without
// peer mutual TLS and API authentication, unless the operator said
// insecure: anyone who reaches such a node owns the cluster.
func (c *ServerConfig) checkExposure() error {
	var exposed []string
	for _, a := range []struct{ key, addr string }{
		{"raft_bind", c.RaftBind}, {"raft_advertise", c.RaftAdvertise}, {"api_bind", c.APIBind}, {"api_advertise", c.APIAdvertise},
	} {
		if a.addr != "" && !isLoopback(a.addr) {
			exposed = append(exposed, a.key+" "+a.addr)
		}
	}
	if len(exposed) == 0 || c.Insecure {
		return nil
	}
	creds, _ := c.credentials()
	var missing []string
	if !c.TLS.Peer.set() {
		missing = append(missing, "peer mutual TLS ([tls.peer])")
	}
	if !creds.Enabled() {
		missing = append(missing, "API authentication ([[auth.tokens]] or [tls.api] verify_clients)")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("refusing to start: %s is not loopback and there is no %s; configure it (docs/security.md) or start with --insecure",
		strings.Join(exposed, ", "), strings.Join(missing, " and no "))
}

// secured reports whether the node runs with both peer TLS and API
// authentication.
func (c *ServerConfig) secured() bool {
	creds, _ := c.credentials()
	return c.TLS.Peer.set() && creds.Enabled()
}

// isLoopback: a loopback IP or "localhost".
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var errUsage = errors.New("usage")
