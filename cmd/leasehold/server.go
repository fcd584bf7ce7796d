package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/api"
	"github.com/leasehold/leasehold/transport"
)

// serverFlags override the config file; each has a LEASEHOLD_* variable.
func serverFlags() []cli.Flag {
	env := func(name string) []string { return []string{"LEASEHOLD_" + name} }
	d := defaultServerConfig()
	flags := []cli.Flag{
		&cli.StringFlag{Name: "config", Aliases: []string{"c"}, EnvVars: env("CONFIG"), Usage: "TOML configuration file (see leasehold.example.toml); flags override it", DefaultText: "none"},
		&cli.StringFlag{Name: "node-id", EnvVars: env("NODE_ID"), Usage: "stable node id (TOML: node_id)", DefaultText: "generated and kept in the data dir"},
		&cli.StringFlag{Name: "data-dir", EnvVars: env("DATA_DIR"), Value: d.DataDir, Usage: "Raft log, snapshots and node id (TOML: data_dir)"},
		&cli.StringFlag{Name: "raft-bind", EnvVars: env("RAFT_BIND"), Value: d.RaftBind, Usage: "Raft port, host:port (TOML: raft_bind)"},
		&cli.StringFlag{Name: "raft-advertise", EnvVars: env("RAFT_ADVERTISE"), Usage: "Raft address peers dial (TOML: raft_advertise)", DefaultText: "the bound address"},
		&cli.StringFlag{Name: "api-bind", EnvVars: env("API_BIND"), Value: d.APIBind, Usage: "API port, host:port (TOML: api_bind)"},
		&cli.StringFlag{Name: "api-advertise", EnvVars: env("API_ADVERTISE"), Usage: "API address clients are pointed to (TOML: api_advertise)", DefaultText: "the bound address"},
		&cli.IntFlag{Name: "bootstrap-expect", EnvVars: env("BOOTSTRAP_EXPECT"), Usage: "voters to wait for before forming a cluster: 1, 3 or 5 (TOML: bootstrap_expect)", DefaultText: "0, never bootstrap, only join"},
		&cli.StringSliceFlag{Name: "join", EnvVars: env("JOIN"), Usage: "peers' Raft addresses, comma separated (TOML: join)", DefaultText: "none"},
		&cli.StringFlag{Name: "log-level", EnvVars: env("LOG_LEVEL"), Value: d.LogLevel, Usage: "trace, debug, info, warn or error (TOML: log_level)"},
		&cli.BoolFlag{Name: "log-json", EnvVars: env("LOG_JSON"), Usage: "log one JSON object per line, for log shippers (TOML: log_json)"},
		&cli.BoolFlag{Name: "pprof", EnvVars: env("PPROF"), Usage: "serve Go's profiles at /debug/pprof/ to admin credentials (TOML: [debug] pprof)"},
		&cli.BoolFlag{Name: "heap-dump", EnvVars: env("HEAP_DUMP"), Usage: "serve a dump of the heap, every secret the node holds included, at /debug/heapdump to admin credentials (with authentication off: to callers on this host only) (TOML: [debug] heap_dump)"},
		&cli.BoolFlag{Name: "insecure", EnvVars: env("INSECURE"), Usage: "start even when a non-loopback address has no peer mutual TLS or no API authentication (anyone who reaches it owns the cluster; see docs/security.md) (TOML: insecure)"},
		&cli.IntFlag{Name: "raft-fd", Usage: "serve Raft on the listening TCP socket inherited as this file descriptor (bound by whoever started the process, as test launchers do); its address stands in for --raft-bind", DefaultText: "none"},
		&cli.IntFlag{Name: "api-fd", Usage: "serve the API on the listening TCP socket inherited as this file descriptor; its address stands in for --api-bind", DefaultText: "none"},
		timingScaleFlag(env("TIMING_SCALE")),
	}
	return append(flags, timingFlags(env)...)
}

// resolveServerConfig builds the configuration: defaults, then the file,
// then flags and environment variables that were set.
func resolveServerConfig(c *cli.Context) (ServerConfig, error) {
	cfg := defaultServerConfig()
	if path := c.String("config"); path != "" {
		keys, err := decodeConfigFile(path, &cfg)
		if err != nil {
			return cfg, err
		}
		for _, k := range keys {
			cfg.markSet(k)
		}
	}
	str := func(flag string, into *string) {
		if c.IsSet(flag) {
			*into = c.String(flag)
		}
	}
	str("node-id", &cfg.NodeID)
	str("data-dir", &cfg.DataDir)
	str("raft-bind", &cfg.RaftBind)
	str("raft-advertise", &cfg.RaftAdvertise)
	str("api-bind", &cfg.APIBind)
	str("api-advertise", &cfg.APIAdvertise)
	str("log-level", &cfg.LogLevel)
	if c.IsSet("log-json") {
		cfg.LogJSON = c.Bool("log-json")
	}
	if c.IsSet("insecure") {
		cfg.Insecure = c.Bool("insecure")
	}
	if c.IsSet("pprof") {
		cfg.Debug.Pprof = c.Bool("pprof")
	}
	if c.IsSet("heap-dump") {
		cfg.Debug.HeapDump = c.Bool("heap-dump")
	}
	if c.IsSet("bootstrap-expect") {
		cfg.BootstrapExpect = c.Int("bootstrap-expect")
	}
	if c.IsSet("join") {
		cfg.Join = splitList(c.StringSlice("join"))
	}
	setTimings(c, &cfg)
	cfg.timingScale = c.Float64("timing-scale")
	return cfg, checkTimingScale(cfg.timingScale)
}

func serverCommand() *cli.Command {
	return &cli.Command{
		Name:  "server",
		Usage: "run a leasehold node",
		Description: "Runs one node. The same command line works on first boot and on restart:\n" +
			"  leasehold server --config /etc/leasehold/leasehold.toml --bootstrap-expect 3 --join a:7711,b:7711,c:7711\n" +
			"A node reachable from other hosts needs [tls.peer] and API authentication, or --insecure.\n" +
			"SIGHUP reloads certificates, CAs and tokens; SIGINT or SIGTERM stops the node (a leader hands over first).\n" +
			"Timings left unset fit those set (a lone --grace-seconds 2 lowers renew to 0.4 s), and --timing-scale\n" +
			"multiplies every liveness timing: docs/operations.md, \"Timings\".",
		Flags: serverFlags(),
		Action: func(c *cli.Context) error {
			cfg, err := resolveServerConfig(c)
			if err != nil {
				return err
			}
			if err := cfg.inheritListeners(c.Int("raft-fd"), c.Int("api-fd")); err != nil {
				return err
			}
			logger := newLogger(cfg.LogLevel, cfg.LogJSON, os.Stderr)
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServer(ctx, c, cfg, logger)
		},
	}
}

// inheritListeners takes the listening sockets a parent bound and passed
// as file descriptors (0: none), so a launcher never picks a port and
// releases it for the node to bind again, which another process may take
// in between. Each socket's address replaces the bind address.
func (c *ServerConfig) inheritListeners(raftFD, apiFD int) error {
	for _, s := range []struct {
		flag string
		fd   int
		ln   *net.Listener
		bind *string
	}{{"--raft-fd", raftFD, &c.raftListener, &c.RaftBind}, {"--api-fd", apiFD, &c.apiListener, &c.APIBind}} {
		if s.fd == 0 {
			continue
		}
		if s.fd < 3 {
			return fmt.Errorf("%s %d: not an inherited socket (0, 1 and 2 are stdin, stdout and stderr)", s.flag, s.fd)
		}
		f := os.NewFile(uintptr(s.fd), s.flag)
		ln, err := net.FileListener(f)
		f.Close() // FileListener holds its own copy
		if err != nil {
			return fmt.Errorf("%s %d: %w", s.flag, s.fd, err)
		}
		if _, ok := ln.Addr().(*net.TCPAddr); !ok {
			ln.Close()
			return fmt.Errorf("%s %d: %s is not a TCP socket", s.flag, s.fd, ln.Addr())
		}
		*s.ln, *s.bind = ln, ln.Addr().String()
	}
	return nil
}

// runningNode is a node with its API, as `server` and `dev` run them.
type runningNode struct {
	node *cluster.Node
	api  *api.Server
	http *api.HTTPServer
	// The TLS material in use, reloaded on SIGHUP (nil when off).
	peerTLS, apiTLS *transport.TLSMaterial
}

// apiHostNames is the name in api_advertise (or api_bind), if it is a
// name: a node without API authentication answers requests that call it
// by that name, an IP address or localhost.
func (c ServerConfig) apiHostNames() []string {
	var names []string
	for _, addr := range []string{c.APIAdvertise, c.APIBind} {
		if host, _, err := net.SplitHostPort(addr); err == nil && host != "" && net.ParseIP(host) == nil {
			names = append(names, host)
		}
	}
	return names
}

// startNode starts a node and serves its API.
func startNode(cfg ServerConfig, logger hclog.Logger) (*runningNode, error) {
	ccfg, peerTLS, err := cfg.clusterConfig(logger)
	if err != nil {
		return nil, err
	}
	creds, _ := cfg.credentials()
	apiTLS, apiConf, err := cfg.apiTLS()
	if err != nil {
		return nil, err
	}
	insecure := cfg.Insecure && !cfg.secured()
	if insecure {
		logger.Warn("insecure", "reason", "started with --insecure: without peer mutual TLS or API authentication anyone who reaches this node owns the cluster",
			"peer_tls", cfg.TLS.Peer.set(), "api_auth", creds.Enabled())
	}
	ln := cfg.apiListener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.APIBind); err != nil {
			return nil, fmt.Errorf("api port: %w", err)
		}
	}
	node, err := cluster.New(ccfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv := api.NewServer(api.Options{Node: node, Credentials: creds, Cluster: cfg.ClusterName, Insecure: insecure,
		Limits: cfg.apiLimits(), Pprof: cfg.Debug.Pprof, HeapDump: cfg.Debug.HeapDump, HostNames: cfg.apiHostNames(), Logger: logger})
	return &runningNode{node: node, api: srv, http: api.Serve(srv, ln, apiConf), peerTLS: peerTLS, apiTLS: apiTLS}, nil
}

// reload re-reads the certificates, CAs and tokens. Whatever fails to load
// keeps what is in use, and the error says what.
func (r *runningNode) reload(cfg ServerConfig) error {
	var errs []error
	for _, m := range []*transport.TLSMaterial{r.peerTLS, r.apiTLS} {
		if m != nil {
			if err := m.Reload(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if creds, err := cfg.credentials(); err != nil {
		errs = append(errs, err)
	} else {
		r.api.SetCredentials(creds)
	}
	return errors.Join(errs...)
}

// stop shuts down in order: the API first (long polls end, clients move
// on), then the node, which hands leadership over before it stops.
func (r *runningNode) stop(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return errors.Join(r.http.Shutdown(ctx), r.node.Shutdown(ctx))
}

// runServer runs a node until ctx ends. SIGHUP reloads certificates, CAs
// and tokens (the configuration file is read again for tokens); it never
// stops the node.
func runServer(ctx context.Context, c *cli.Context, cfg ServerConfig, logger hclog.Logger) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	n, err := startNode(cfg, logger)
	if err != nil {
		return err
	}
	logger.Info("serving", "node_id", n.node.ID(), "api", cfg.APIBind, "raft", n.node.RaftAddr())
	for {
		select {
		case <-hup:
			fresh, err := resolveServerConfig(c)
			if err == nil {
				err = n.reload(fresh)
			}
			if err != nil {
				logger.Warn("reload_failed", "error", err, "kept", "what failed to load stays as it was")
			} else {
				logger.Info("reloaded", "what", "certificates, CAs and tokens")
			}
		case <-ctx.Done():
			logger.Info("shutting_down")
			return n.stop(15 * time.Second)
		case <-n.node.Done():
			// The node stopped on its own (a log entry it cannot apply);
			// its error is the one line the process exits with.
			n.stop(15 * time.Second)
			return fmt.Errorf("node stopped: %w", n.node.Err())
		}
	}
}

// newLogger is the server's logger: text, or one JSON object per line
// (hclog's: "@level", "@message", "@module", "@timestamp" and the pairs).
func newLogger(level string, json bool, out io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "leasehold", Level: hclog.LevelFromString(level), Output: out, JSONFormat: json})
}
