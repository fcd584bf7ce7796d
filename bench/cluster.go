package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/localcluster"
)

// ClusterOptions describe a local cluster: Nodes `leasehold server`
// processes of Binary on loopback, each with its own data directory.
type ClusterOptions struct {
	// Binary is the leasehold executable. Required.
	Binary string
	// Nodes is 1, 3 or 5. Default 3.
	Nodes int
	// Dir holds the nodes' data, config and logs. Default: a temporary
	// directory, removed by Stop.
	Dir string
	// The executor timings, in seconds. Defaults 1, 5 and 15.
	RenewSeconds, GraceSeconds, TolerationSeconds float64
	// LogLevel of the nodes' logs (each in Dir/node-N.log). Default warn.
	LogLevel string
	// ReadyTimeout bounds the wait for a leader every node agrees on.
	// Default 30s.
	ReadyTimeout time.Duration
	// LogStore is [raft] log_store of every node; empty keeps the
	// server's default.
	LogStore string
	// Token, when set, turns on authentication: the nodes accept it as an
	// admin token, and every call must carry it.
	Token string
	// Pprof serves the nodes' Go profiles at /debug/pprof/ (to admins:
	// anyone when Token is empty), which scale reads the heap from, and a
	// dump of their heaps at /debug/heapdump (to admins; when Token is
	// empty, to callers on the host).
	Pprof bool
	// ServerRaftTimeouts keeps the server's own Raft timeouts instead of
	// the bench's short ones (raftTOML), as scale does: it measures the
	// service as deployed, not a failover.
	ServerRaftTimeouts bool
}

// raftTOML is every node's config file. The Raft timeouts are the
// server's defaults, so failover is measured as shipped.
const raftTOML = `# written by leasehold bench
[raft]
`

// LocalCluster is a cluster of server processes the bench started: the
// launcher every local cluster of this repository uses.
type LocalCluster = localcluster.Cluster

// StartCluster starts the servers and waits until every node is ready and
// names the same leader. On error nothing is left running.
func StartCluster(ctx context.Context, o ClusterOptions) (*LocalCluster, error) {
	o = o.withDefaults()
	if o.Binary == "" {
		return nil, fmt.Errorf("%w: ClusterOptions.Binary is empty", ErrInvalidConfig)
	}
	if o.Nodes != 1 && o.Nodes != 3 && o.Nodes != 5 {
		return nil, fmt.Errorf("%w: Nodes %d: 1, 3 or 5", ErrInvalidConfig, o.Nodes)
	}
	cfg := raftTOML
	if o.ServerRaftTimeouts {
		cfg = "# written by leasehold bench\n[raft]\n"
	}
	if o.LogStore != "" {
		cfg += fmt.Sprintf("log_store = %q\n", o.LogStore)
	}
	if o.Token != "" {
		cfg += fmt.Sprintf("\n[[auth.tokens]]\nname = \"bench\"\ntoken = %q\nrole = \"admin\"\n", o.Token)
	}
	secs := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	args := []string{"--renew-seconds", secs(o.RenewSeconds), "--grace-seconds", secs(o.GraceSeconds),
		"--toleration-seconds", secs(o.TolerationSeconds), "--log-level", o.LogLevel}
	if o.Pprof {
		args = append(args, "--pprof", "--heap-dump")
	}
	lc, err := localcluster.Start(ctx, localcluster.Options{Binary: o.Binary, Nodes: o.Nodes, Dir: o.Dir, Config: cfg, Args: args,
		ReadyTimeout: o.ReadyTimeout})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrClusterStart, err)
	}
	return lc, nil
}

func (o ClusterOptions) withDefaults() ClusterOptions {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.RenewSeconds == 0 {
		o.RenewSeconds = 1
	}
	if o.GraceSeconds == 0 {
		o.GraceSeconds = 5
	}
	if o.TolerationSeconds == 0 {
		o.TolerationSeconds = 15
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	return o
}
