package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/bench"
	"github.com/leasehold/leasehold/cluster"
)

// benchUsage is each workload's one-line help.
var benchUsage = map[string]string{
	"acquire":   "grants: acquire pre-submitted jobs, one lease per call",
	"heartbeat": "workers holding --leases leases each, heartbeating back to back",
	"status":    "the API alone: status calls, no Raft and no state (the floor under every call)",
	"job-cycle": "acquire, one heartbeat, report (--submit adds the submit)",
	"mixed":     "job cycles while --held leases are heartbeated every renew (open loop)",
	"expiry":    "--abandon leases abandoned at once: how late each expires, how long the drain takes",
	"failover":  "job cycles and held leases while the leader is killed with SIGKILL (needs --start)",
	"fencing":   "reports with old tokens after another worker took the job: all must be refused",
	"scale":     "--workers workers holding --leases leases each, heartbeating on schedule; memory, snapshot, restart (needs --start)",
}

func benchCommand() *cli.Command {
	cmd := &cli.Command{
		Name:      "bench",
		Usage:     "measure a cluster: throughput, latency, CPU and fsyncs of one workload",
		ArgsUsage: "WORKLOAD",
		Description: "Runs one workload against a running cluster (--endpoints), or against a fresh local\n" +
			"cluster of separate server processes with data on disk (--start 3), torn down on exit\n" +
			"and on Ctrl-C. docs/performance.md explains each workload and every figure.\n" +
			"  leasehold bench job-cycle --start 3 -c 16 -d 10s\n" +
			"  leasehold bench heartbeat -e a:7701,b:7701,c:7701 -o result\n" +
			"-o result prints one line: RESULT system=leasehold op=WORKLOAD c=N ops=N ...",
	}
	for _, w := range bench.Workloads {
		cmd.Subcommands = append(cmd.Subcommands, &cli.Command{
			Name: w, Usage: benchUsage[w], Flags: benchFlags(),
			Action: func(c *cli.Context) error { return runBench(c, w) },
		})
	}
	return cmd
}

func benchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "concurrency", Aliases: []string{"c"}, Value: 16, Usage: "concurrent callers, one request in flight each"},
		&cli.DurationFlag{Name: "duration", Aliases: []string{"d"}, Value: 10 * time.Second, Usage: "measured window"},
		&cli.DurationFlag{Name: "warmup", Value: time.Second, Usage: "unmeasured load before the window"},
		&cli.StringFlag{Name: "target", Value: "leader", Usage: "leader (pin to the leader) or any (round-robin over every endpoint)"},
		&cli.IntFlag{Name: "payload-size", Usage: "bytes of payload per job"},
		&cli.IntFlag{Name: "conns", Usage: "clients (HTTP/2 connections per node) the callers share", DefaultText: "1; 8 for scale"},
		&cli.IntFlag{Name: "leases", Value: 10, Usage: "leases each worker holds (heartbeat, acquire, held leases, scale)"},
		&cli.IntFlag{Name: "workers", Value: 100000, Usage: "scale: simulated workers, each heartbeating once per renew"},
		&cli.StringFlag{Name: "heap-profile", Usage: "scale: write the leader's heap profile after the window to this file (go tool pprof reads it)"},
		&cli.StringFlag{Name: "leader-profile", Usage: "write the leader's CPU profile over the measured window's whole seconds to this file, read from its /debug/pprof/profile (acquire, heartbeat, status, job-cycle, mixed, fencing; with --start the nodes serve it, else they need --pprof and the bench an admin token): the servers' side"},
		&cli.StringFlag{Name: "cpu-profile", Usage: "write the bench process's own CPU profile over the measured window to this file (acquire, heartbeat, status, job-cycle, mixed, failover, fencing): the client side's cost"},
		&cli.IntFlag{Name: "held", Value: 10000, Usage: "mixed, failover: leases heartbeated on schedule"},
		&cli.IntFlag{Name: "abandon", Value: 10000, Usage: "expiry: leases abandoned at once"},
		&cli.IntFlag{Name: "jobs", Usage: "acquire, job-cycle: jobs to pre-submit", DefaultText: "sized from the warmup's rate"},
		&cli.BoolFlag{Name: "submit", Usage: "job-cycle: submit the job in each cycle"},
		&cli.BoolFlag{Name: "unchained", Usage: "job-cycle: take each job with an acquire call of its own, not in the report that ends the previous cycle"},
		&cli.BoolFlag{Name: "unary", Usage: "heartbeat, held leases: one call per heartbeat instead of a heartbeat stream per worker"},
		&cli.BoolFlag{Name: "shared-streams", Usage: "heartbeat: the workers share one heartbeat stream per client (--conns) instead of a stream each"},
		&cli.BoolFlag{Name: "pprof", Usage: "with --start: the nodes serve Go profiles at /debug/pprof/ (their API addresses are printed), e.g. go tool pprof http://ADDR/debug/pprof/profile?seconds=10, and a dump of their heaps at /debug/heapdump (go run ./bench/holes reads it)"},
		&cli.StringFlag{Name: "log-store", Usage: "with --start: the nodes' [raft] log_store, wal or boltdb (default: the server's)"},
		&cli.StringFlag{Name: "server-bin", Usage: "with --start: the leasehold executable the nodes run, so one build's load generator can measure another build's servers (bench/compare.sh DRIVER=new)", DefaultText: "this one"},
		&cli.BoolFlag{Name: "flood", Usage: "job-cycle: run a hostile client beside the load (gzip bombs, oversized bodies, hanging connections, ghost heartbeats, bad tokens)"},
		&cli.IntFlag{Name: "rounds", Value: 3, Usage: "fencing: grants per job (all but the last reported stale)"},
		&cli.DurationFlag{Name: "drain-timeout", Value: time.Minute, Usage: "expiry: wait this long after the last deadline"},
		&cli.DurationFlag{Name: "kill-after", Usage: "failover: kill the leader this far into the window", DefaultText: "half of it"},
		&cli.DurationFlag{Name: "call-timeout", Value: 10 * time.Second, Usage: "bound on each call, retries included"},
		&cli.IntFlag{Name: "start", Usage: "start a local cluster of N nodes (1, 3 or 5) for the run instead of using --endpoints"},
		&cli.Float64Flag{Name: "renew-seconds", Value: 1, Usage: "with --start: renew_seconds", DefaultText: "1; 10 for scale, the server's default"},
		&cli.Float64Flag{Name: "grace-seconds", Value: 5, Usage: "with --start: grace_seconds", DefaultText: "5; 50 for scale"},
		&cli.Float64Flag{Name: "toleration-seconds", Value: 15, Usage: "with --start: toleration_seconds", DefaultText: "15; 300 for scale"},
		&cli.StringFlag{Name: "node-log-level", Value: "warn", Usage: "with --start: the nodes' log level (logs in the data directory)"},
	}
}

func runBench(c *cli.Context, workload string) error {
	if c.NArg() != 0 {
		return usageOf(c, "unexpected argument %q (flags go after the workload)", c.Args().First())
	}
	// -o is the global flag; bench accepts result besides table and json,
	// which is why it reads it here rather than through newClient.
	format := flagString(c, "output")
	if format != "table" && format != "json" && format != "result" {
		return usageOf(c, "--output %q: table, json or result", format)
	}
	cfg := bench.Config{
		Workload: workload, Concurrency: c.Int("concurrency"), Duration: c.Duration("duration"),
		Warmup: c.Duration("warmup"), Target: bench.Target(c.String("target")), PayloadSize: c.Int("payload-size"),
		Conns: c.Int("conns"), Leases: c.Int("leases"), Workers: c.Int("workers"), HeapProfile: c.String("heap-profile"), CPUProfile: c.String("cpu-profile"), LeaderProfile: c.String("leader-profile"), Held: c.Int("held"), Abandon: c.Int("abandon"),
		Jobs: c.Int("jobs"), Submit: c.Bool("submit"), Unchained: c.Bool("unchained"), Unary: c.Bool("unary"), Shared: c.Bool("shared-streams"), Flood: c.Bool("flood"), Rounds: c.Int("rounds"), DrainTimeout: c.Duration("drain-timeout"),
		KillAfter: c.Duration("kill-after"), CallTimeout: c.Duration("call-timeout"), Log: os.Stderr,
	}
	if cfg.Workload == "failover" && c.Int("start") == 0 {
		return fmt.Errorf("bench failover kills the leader's process with SIGKILL, which only a cluster the bench started can do: add --start 3")
	}
	if cfg.Workload == "scale" && c.Int("start") == 0 {
		return fmt.Errorf("bench scale reads the leader's memory from /proc and restarts a follower, which only a cluster the bench started allows: add --start 3")
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if n := c.Int("start"); n > 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench --start: finding this binary: %w", err)
		}
		if bin := c.String("server-bin"); bin != "" {
			if exe, err = exec.LookPath(bin); err == nil {
				exe, err = filepath.Abs(exe)
			}
			if err != nil {
				return usageOf(c, "--server-bin %q: %v", bin, err)
			}
		}
		t0 := time.Now()
		if cfg.Flood {
			// A flood means something only against a cluster that
			// authenticates: the bench's calls carry a token, the flood's
			// "bad token" calls another.
			cfg.Token = "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-flood-token"
		}
		renew, grace, toleration := startTimings(c, workload)
		lc, err := bench.StartCluster(ctx, bench.ClusterOptions{
			Binary: exe, Nodes: n, RenewSeconds: renew, GraceSeconds: grace,
			TolerationSeconds: toleration, LogLevel: c.String("node-log-level"),
			Token: cfg.Token, LogStore: c.String("log-store"),
			// scale reads the leader's heap from its profile, and runs the
			// servers as deployed; --leader-profile reads the leader's CPU
			// profile.
			Pprof: workload == "scale" || c.Bool("pprof") || cfg.LeaderProfile != "", ServerRaftTimeouts: workload == "scale",
		})
		if err != nil {
			return err
		}
		defer lc.Stop()
		fmt.Fprintf(os.Stderr, "bench: started %d nodes in %s (data in %s)\n", n, time.Since(t0).Round(time.Millisecond), lc.Dir())
		if c.Bool("pprof") {
			fmt.Fprintf(os.Stderr, "bench: the nodes' profiles: %s (each http://ADDR/debug/pprof/, and its heap at http://ADDR/debug/heapdump)\n", strings.Join(lc.Endpoints(), ", "))
		}
		cfg.Cluster = lc
		res, err := bench.Run(ctx, cfg)
		if err != nil {
			if ctx.Err() != nil {
				return errInterrupted
			}
			fmt.Fprintf(os.Stderr, "bench: the nodes' logs:\n%s", lc.Logs())
			return err
		}
		return printBench(format, res)
	}

	cfg.Endpoints = splitList(lookup(c, "endpoints").StringSlice("endpoints"))
	cfg.Token = flagString(c, "token")
	if ca := flagString(c, "ca-file"); ca != "" {
		tlsConfig, err := benchTLS(ca)
		if err != nil {
			return err
		}
		cfg.TLS = tlsConfig
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return err
	}
	return printBench(format, res)
}

var errInterrupted = errors.New("bench: interrupted; nothing measured")

// startTimings are the executor timings of a started cluster: the flags'.
// scale runs at the server's own defaults unless told otherwise, since its
// load is a heartbeat per worker per renew, as a real fleet's would be.
func startTimings(c *cli.Context, workload string) (renew, grace, toleration float64) {
	renew, grace, toleration = c.Float64("renew-seconds"), c.Float64("grace-seconds"), c.Float64("toleration-seconds")
	if workload == "scale" {
		d := cluster.DefaultConfig()
		if !c.IsSet("renew-seconds") {
			renew = d.Renew.Seconds()
		}
		if !c.IsSet("grace-seconds") {
			grace = d.Grace.Seconds()
		}
		if !c.IsSet("toleration-seconds") {
			toleration = d.Toleration.Seconds()
		}
	}
	return renew, grace, toleration
}

// benchTLS is newClient's --ca-file handling.
func benchTLS(ca string) (*tls.Config, error) {
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-file %s: no PEM certificate", ca)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func printBench(format string, r *bench.Result) error {
	switch format {
	case "result":
		_, err := fmt.Println(r.Line())
		return err
	case "json":
		return r.WriteJSON(os.Stdout)
	}
	return r.WriteTable(os.Stdout)
}
