package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/api"
)

// ServerConfig is the server's configuration as an operator writes it
// (leasehold.example.toml documents every key). Flags and LEASEHOLD_*
// environment variables override the file.
type ServerConfig struct {
	NodeID          string   `toml:"node_id"`
	DataDir         string   `toml:"data_dir"`
	RaftBind        string   `toml:"raft_bind"`
	RaftAdvertise   string   `toml:"raft_advertise"`
	APIBind         string   `toml:"api_bind"`
	APIAdvertise    string   `toml:"api_advertise"`
	BootstrapExpect int      `toml:"bootstrap_expect"`
	Join            []string `toml:"join"`
	LogLevel        string   `toml:"log_level"`

	Raft      RaftSection      `toml:"raft"`
	Retention RetentionSection `toml:"retention"`
	TLS       TLSSection       `toml:"tls"`
	Auth      AuthSection      `toml:"auth"`
	Plugins   struct {
		Executor ExecutorSection `toml:"executor"`
	} `toml:"plugins"`
}

// ExecutorSection is [plugins.executor]: SPEC section 4's timings, in
// seconds (fractions allowed).
type ExecutorSection struct {
	RenewSeconds      float64 `toml:"renew_seconds"`
	GraceSeconds      float64 `toml:"grace_seconds"`
	TolerationSeconds float64 `toml:"toleration_seconds"`
	ExpiryRate        float64 `toml:"expiry_rate"`
	ExpiryBurst       int     `toml:"expiry_burst"`
}

type RaftSection struct {
	HeartbeatTimeout   duration `toml:"heartbeat_timeout"`
	ElectionTimeout    duration `toml:"election_timeout"`
	LeaderLeaseTimeout duration `toml:"leader_lease_timeout"`
	SnapshotInterval   duration `toml:"snapshot_interval"`
	SnapshotThreshold  uint64   `toml:"snapshot_threshold"`
	TrailingLogs       uint64   `toml:"trailing_logs"`
}

type RetentionSection struct {
	Jobs            duration `toml:"jobs"`
	Events          duration `toml:"events"`
	CompactInterval duration `toml:"compact_interval"`
}

// TLSSection turns on TLS for both ports: the API and Raft.
type TLSSection struct {
	CertFile string `toml:"cert_file"`
	KeyFile  string `toml:"key_file"`
	// CAFile verifies peers (and, with VerifyClients, clients).
	CAFile        string `toml:"ca_file"`
	VerifyClients bool   `toml:"verify_clients"`
}

// AuthSection turns on bearer tokens.
type AuthSection struct {
	Tokens []TokenEntry `toml:"tokens"`
}

type TokenEntry struct {
	Token string `toml:"token"`
	Role  string `toml:"role"`
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
	c.Raft = RaftSection{
		HeartbeatTimeout: duration{d.HeartbeatTimeout}, ElectionTimeout: duration{d.ElectionTimeout},
		LeaderLeaseTimeout: duration{d.LeaderLeaseTimeout}, SnapshotInterval: duration{d.SnapshotInterval},
		SnapshotThreshold: d.SnapshotThreshold, TrailingLogs: d.TrailingLogs,
	}
	c.Retention = RetentionSection{Jobs: duration{d.Retention}, Events: duration{d.EventRetention}, CompactInterval: duration{d.CompactInterval}}
	c.Plugins.Executor = ExecutorSection{
		RenewSeconds: d.Renew.Seconds(), GraceSeconds: d.Grace.Seconds(), TolerationSeconds: d.Toleration.Seconds(),
		ExpiryRate: d.ExpiryRate, ExpiryBurst: d.ExpiryBurst,
	}
	return c
}

// loadConfigFile decodes a TOML file strictly: an unknown key is an error
// that names it.
func loadConfigFile(path string, into *ServerConfig) error {
	md, err := toml.DecodeFile(path, into)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		keys := make([]string, len(undecoded))
		for i, k := range undecoded {
			keys[i] = k.String()
		}
		return fmt.Errorf("config %s: unknown key %s", path, strings.Join(keys, ", "))
	}
	return nil
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// clusterConfig turns the operator's configuration into the node's, and
// validates it (cluster.Config.Validate names the field).
func (c *ServerConfig) clusterConfig(logger hclog.Logger) (cluster.Config, error) {
	cfg := cluster.DefaultConfig()
	cfg.NodeID, cfg.DataDir = c.NodeID, c.DataDir
	cfg.RaftBind, cfg.RaftAdvertise = c.RaftBind, c.RaftAdvertise
	cfg.APIAddr = c.APIAdvertise
	if cfg.APIAddr == "" {
		cfg.APIAddr = c.APIBind
	}
	cfg.BootstrapExpect, cfg.Join = c.BootstrapExpect, c.Join
	e := c.Plugins.Executor
	cfg.Renew, cfg.Grace, cfg.Toleration = seconds(e.RenewSeconds), seconds(e.GraceSeconds), seconds(e.TolerationSeconds)
	cfg.ExpiryRate, cfg.ExpiryBurst = e.ExpiryRate, e.ExpiryBurst
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = c.Raft.HeartbeatTimeout.Duration, c.Raft.ElectionTimeout.Duration
	cfg.LeaderLeaseTimeout = c.Raft.LeaderLeaseTimeout.Duration
	cfg.SnapshotInterval, cfg.SnapshotThreshold, cfg.TrailingLogs = c.Raft.SnapshotInterval.Duration, c.Raft.SnapshotThreshold, c.Raft.TrailingLogs
	cfg.Retention, cfg.EventRetention, cfg.CompactInterval = c.Retention.Jobs.Duration, c.Retention.Events.Duration, c.Retention.CompactInterval.Duration
	cfg.Logger = logger
	cfg.Clock = serverClock()
	if c.TLS.CertFile != "" {
		server, client, err := c.TLS.configs()
		if err != nil {
			return cfg, err
		}
		cfg.RaftTLS, cfg.RaftClientTLS = server, client
	}
	if _, err := c.tokens(); err != nil {
		return cfg, err
	}
	if !slices.Contains([]string{"trace", "debug", "info", "warn", "error"}, c.LogLevel) {
		return cfg, &cluster.ConfigError{Field: "log_level", Value: c.LogLevel, Reason: "one of trace, debug, info, warn, error"}
	}
	if c.APIBind == "" {
		return cfg, &cluster.ConfigError{Field: "api_bind", Value: c.APIBind, Reason: "must be set"}
	}
	return cfg, cfg.Validate()
}

// configs builds the server and client TLS configurations shared by both
// ports.
func (t *TLSSection) configs() (server, client *tls.Config, err error) {
	if t.KeyFile == "" {
		return nil, nil, &cluster.ConfigError{Field: "tls.key_file", Value: "", Reason: "required with tls.cert_file"}
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, nil, &cluster.ConfigError{Field: "tls.cert_file", Value: t.CertFile, Reason: err.Error()}
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, nil, &cluster.ConfigError{Field: "tls.ca_file", Value: t.CAFile, Reason: err.Error()}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, &cluster.ConfigError{Field: "tls.ca_file", Value: t.CAFile, Reason: "no PEM certificate in it"}
		}
		client.RootCAs = pool
		server.ClientCAs = pool
	}
	if t.VerifyClients {
		if t.CAFile == "" {
			return nil, nil, &cluster.ConfigError{Field: "tls.verify_clients", Value: true, Reason: "needs tls.ca_file"}
		}
		server.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return server, client, nil
}

func (c *ServerConfig) tokens() (map[string]api.Role, error) {
	if len(c.Auth.Tokens) == 0 {
		return nil, nil
	}
	out := map[string]api.Role{}
	for i, t := range c.Auth.Tokens {
		role := api.Role(t.Role)
		if role != api.RoleAdmin && role != api.RoleSubmitter && role != api.RoleWorker {
			return nil, &cluster.ConfigError{Field: fmt.Sprintf("auth.tokens[%d].role", i), Value: t.Role, Reason: "one of admin, submitter, worker"}
		}
		if len(t.Token) < 16 {
			// Never echo a token back, not even a bad one.
			return nil, &cluster.ConfigError{Field: fmt.Sprintf("auth.tokens[%d].token", i), Value: "(hidden)", Reason: "at least 16 characters"}
		}
		out[t.Token] = role
	}
	return out, nil
}

var errUsage = errors.New("usage")
