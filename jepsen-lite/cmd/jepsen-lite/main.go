// Command jepsen-lite runs real leasehold processes under partitions,
// kills, pauses, clock faults, full disks, an outsider's forged peer
// traffic and a flood of hostile calls, records a history of everything,
// and checks SPEC's invariants I1 to I12, O1 (nothing outside the cluster
// changed it) and F1 (the flood was refused and evicted nothing) from it.
//
//	jepsen-lite run --bin bin/leasehold-chaos --nemesis partition --out /tmp/jl
//	jepsen-lite profile --bin-dir bin --out /tmp/jl ci
//	jepsen-lite check /tmp/jl/partition-5/history.jsonl
//
// The leasehold binary must be built with -tags chaos (`make chaos` builds
// it and the broken variants). As root with ip and iptables, nodes run in
// network namespaces; otherwise behind TCP proxies on loopback.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/jepsen-lite/checker"
	"github.com/leasehold/leasehold/jepsen-lite/disk"
	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/jepsen-lite/nemesis"
	"github.com/leasehold/leasehold/jepsen-lite/netem"
	"github.com/leasehold/leasehold/jepsen-lite/runner"
	"github.com/leasehold/leasehold/jepsen-lite/workload"
)

func main() {
	app := &cli.App{
		Name:  "jepsen-lite",
		Usage: "prove leasehold's promises under partitions, kills, pauses and clock faults",
		Commands: []*cli.Command{
			runCommand(), profileCommand(), checkCommand(), workerCommand(), shellJobCommand(), shellWatchCommand(), cleanCommand(),
		},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-lite:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

// interruptible ends on SIGINT or SIGTERM: the run heals, stops every
// process and tears the network down before exiting.
func interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func self() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

func timingsOf(name string) (runner.Timings, error) {
	switch name {
	case "ci":
		return runner.CITimings, nil
	case "production":
		return runner.ProductionTimings, nil
	}
	return runner.Timings{}, fmt.Errorf("--timings %q: ci or production", name)
}

var errFailed = cli.Exit("", 2)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "one run: a cluster, a workload, faults, a heal, a drain, and the checkers",
		ArgsUsage: " ",
		Description: "Families: " + strings.Join(nemesis.Families(), ", ") + ", or mixed; or fault kinds by name:\n" +
			kindNames() + "\n" +
			"outsider: a process on an address of its own, no member, forges joins (a stranger; the leader's id and\n" +
			"address with its capture server as the API address; a live member's id, answering peer.info as it) and\n" +
			"Raft messages with term 2^64-1 at every node's peer port. With --secure it also tries all of it over TLS\n" +
			"with an API client certificate of the cluster's CA, plus in-range Raft messages and TimeoutNow. Without\n" +
			"--secure it sends no in-range Raft message: an open peer port takes those by design (what --insecure\n" +
			"gives up). Checker O1 proves nothing changed: no attempt accepted, the membership and the terms intact,\n" +
			"no connection to the capture server.\n" +
			"\ndisk: as root, each node's data dir is on a tmpfs of its own (--disk-size) that a fault fills to the last\n" +
			"byte (a follower's; the leader's) and then frees; the fault's end waits until the node is ready again\n" +
			"(/readyz) and records when (I12 bounds it). Without root the disk faults are skipped with a note.\n" +
			"\nshell: with --shell-workers N, N `leasehold worker run` processes (ids s1...) take jobs beside the workers, each job's\n" +
			"command (jepsen-lite shell-job) under a supervisor that outlives them; the faults kill -9 a worker run process alone\n" +
			"(restarted within the self-stop deadline, after it, or after the expiry) or reboot it with its supervisors and commands.\n" +
			"I3 and I4 cover the commands' executions; I10 leaves out the jobs a shell worker held (its calls are not recorded).\n" +
			"\n--flood runs a hostile client beside the load, from an address of its own: gzip bombs and oversized\n" +
			"bodies (4/s), 150 connections that send headers and never a body, heartbeats (10/s) and acquires (5/s)\n" +
			"from made-up workers, and with --secure calls with a wrong token (5/s), admin calls with a non-admin\n" +
			"token (3/s) and acquires in real workers' names (2/s). F1 checks that no flood call was served, that no\n" +
			"event the run saw was evicted from any node's event log, that no event names a ghost, and that the\n" +
			"audit records of the refusals stay within their rate (5/s per node).\n" +
			"\nExit status 0: passed; 2: violations (or, with --expect, none of the expected).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "bin", Required: true, Usage: "leasehold binary built with -tags chaos"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "directory for the history, logs, data and report"},
			&cli.IntFlag{Name: "nodes", Value: 3, Usage: "3 or 5"},
			&cli.IntFlag{Name: "workers", Value: 3, Usage: "worker processes"},
			&cli.IntFlag{Name: "concurrency", Value: 3, Usage: "jobs each worker runs at once"},
			&cli.IntFlag{Name: "shell-workers", Usage: "`leasehold worker run` processes beside the workers (ids s1...), each job's command (jepsen-lite shell-job) under a supervisor; the shell family needs them"},
			&cli.StringSliceFlag{Name: "nemesis", Value: cli.NewStringSlice("mixed"), Usage: "families or kinds, comma-separated; none for no faults"},
			&cli.DurationFlag{Name: "duration", Value: 30 * time.Second, Usage: "fault phase (every kind chosen runs at least once)"},
			&cli.Int64Flag{Name: "seed", Usage: "seed of every random choice (default: from the time)"},
			&cli.StringFlag{Name: "net", Value: runner.NetAuto, Usage: "auto (netns as root, else proxy), netns or proxy"},
			&cli.StringFlag{Name: "timings", Value: "ci", Usage: "ci (renew 0.3s, grace 1.5s, toleration 4s) or production (10s, 50s, 300s)"},
			&cli.BoolFlag{Name: "kill-worker-at-end", Usage: "kill a busy worker for good before the heal (orphans, I12)"},
			&cli.BoolFlag{Name: "secure", Usage: "peer mutual TLS, API TLS and tokens (a CA made under --out/pki); otherwise nodes run --insecure"},
			&cli.StringFlag{Name: "log-store", Value: "wal", Usage: "the nodes' [raft] log_store: wal or boltdb"},
			&cli.BoolFlag{Name: "flood", Usage: "run the flood beside the load: oversized bodies, idle connections, ghost workers, bad credentials (F1)"},
			&cli.Int64Flag{Name: "disk-size", Value: runner.DefaultDiskSize, Usage: "bytes of each node's tmpfs in a run with disk faults"},
			&cli.StringSliceFlag{Name: "expect", Usage: "the build is broken: pass only if these invariants (I1..I12, O1, F1, or any) find violations"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "copy the runner's log to stderr"},
		},
		Action: func(c *cli.Context) error {
			t, err := timingsOf(c.String("timings"))
			if err != nil {
				return err
			}
			me, err := self()
			if err != nil {
				return err
			}
			cfg := runner.Config{Name: filepath.Base(c.String("out")), Bin: c.String("bin"), Self: me, Out: c.String("out"),
				Nodes: c.Int("nodes"), Workers: c.Int("workers"), Concurrency: c.Int("concurrency"), ShellWorkers: c.Int("shell-workers"),
				Nemesis: splitAll(c.StringSlice("nemesis")), Duration: c.Duration("duration"), Seed: c.Int64("seed"),
				Net: c.String("net"), Timings: t, KillWorkerAtEnd: c.Bool("kill-worker-at-end"), Secure: c.Bool("secure"), LogStore: c.String("log-store"),
				Flood: c.Bool("flood"), DiskSize: c.Int64("disk-size"),
				Expect: splitAll(c.StringSlice("expect")), Verbose: c.Bool("verbose")}
			ctx, cancel := interruptible()
			defer cancel()
			o, err := runner.Run(ctx, cfg)
			if err != nil {
				return err
			}
			o.Summary(os.Stdout)
			if !o.Passed {
				return errFailed
			}
			return nil
		},
	}
}

func profileCommand() *cli.Command {
	return &cli.Command{
		Name:      "profile",
		Usage:     "a series of runs: ci (about 10 minutes, scaled timings, the broken builds too) or soak (5 nodes, production timings, an hour)",
		ArgsUsage: "ci|soak",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "bin-dir", Value: "bin", Usage: "where `make chaos` put leasehold-chaos and its broken variants"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "directory; each run gets a subdirectory"},
			&cli.Int64Flag{Name: "seed", Usage: "seed of every run (default: each from the time)"},
			&cli.StringSliceFlag{Name: "only", Usage: "run only these runs of the profile, by name"},
			&cli.DurationFlag{Name: "duration", Usage: "override every run's fault phase"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("profile: name one of %s", strings.Join(runner.Profiles(), ", "))
			}
			me, err := self()
			if err != nil {
				return err
			}
			binDir, err := filepath.Abs(c.String("bin-dir"))
			if err != nil {
				return err
			}
			runs, err := runner.Profile(c.Args().First(), runner.BuildsIn(binDir), me, c.String("out"), c.Int64("seed"))
			if err != nil {
				return err
			}
			if only := splitAll(c.StringSlice("only")); len(only) > 0 {
				var keep []runner.Config
				for _, r := range runs {
					for _, o := range only {
						if r.Name == o {
							keep = append(keep, r)
						}
					}
				}
				if len(keep) == 0 {
					return fmt.Errorf("--only %v: no such run", only)
				}
				runs = keep
			}
			if d := c.Duration("duration"); d > 0 {
				for i := range runs {
					runs[i].Duration = d
				}
			}
			for _, r := range runs {
				if _, err := os.Stat(r.Bin); err != nil {
					return fmt.Errorf("%s: %w (run `make chaos-bins`)", r.Bin, err)
				}
			}
			ctx, cancel := interruptible()
			defer cancel()
			outs, err := runner.RunProfile(ctx, runs, os.Stdout)
			if err != nil {
				return err
			}
			for _, o := range outs {
				if !o.Passed {
					return errFailed
				}
			}
			return nil
		},
	}
}

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "check a recorded history (history.jsonl) again",
		ArgsUsage: "HISTORY",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "html", Usage: "directory for Porcupine's HTML of failing jobs"},
			&cli.StringFlag{Name: "json", Usage: "write the report as JSON to this file"},
			&cli.BoolFlag{Name: "allow-unfinished", Usage: "do not require every job to finish (I9)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errors.New("check: name one history file")
			}
			f, err := os.Open(c.Args().First())
			if err != nil {
				return err
			}
			defer f.Close()
			entries, err := history.Read(f)
			if err != nil && !errors.Is(err, history.ErrTruncated) {
				return err
			}
			r := checker.Check(entries, checker.Options{OutDir: c.String("html"), RequireAllFinished: !c.Bool("allow-unfinished")})
			r.Summary(os.Stdout)
			if p := c.String("json"); p != "" {
				out, err := os.Create(p)
				if err != nil {
					return err
				}
				if err := r.WriteJSON(out); err != nil {
					out.Close()
					return err
				}
				if err := out.Close(); err != nil {
					return err
				}
			}
			if !r.OK() {
				return errFailed
			}
			return nil
		},
	}
}

// workerCommand is a worker process of a run; the runner starts it.
func workerCommand() *cli.Command {
	return &cli.Command{
		Name:   "worker",
		Usage:  "a worker process of a run (started by the runner)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "id", Required: true},
			&cli.StringFlag{Name: "process", Required: true},
			&cli.StringFlag{Name: "endpoints", Required: true},
			&cli.StringFlag{Name: "source"},
			&cli.StringFlag{Name: "sink", Required: true},
			&cli.StringFlag{Name: "history", Required: true},
			&cli.IntFlag{Name: "concurrency", Value: 3},
			&cli.DurationFlag{Name: "poll-wait", Value: time.Second},
			&cli.DurationFlag{Name: "call-timeout", Value: time.Second},
			&cli.DurationFlag{Name: "drain-timeout", Value: time.Second},
			&cli.StringFlag{Name: "ca-file", Usage: "speak HTTPS to the cluster, trusting this CA"},
			&cli.StringFlag{Name: "token-file", Usage: "a file holding the bearer token"},
		},
		Action: func(c *cli.Context) error {
			conf, token, err := workload.ReadClientSecrets(c.String("ca-file"), c.String("token-file"))
			if err != nil {
				return err
			}
			ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer cancel()
			return workload.RunWorker(ctx, workload.WorkerConfig{
				ID: c.String("id"), Process: c.String("process"), Endpoints: strings.Split(c.String("endpoints"), ","),
				TLS: conf, Token: token,
				SourceIP: c.String("source"), SinkURL: c.String("sink"), HistoryPath: c.String("history"),
				Concurrency: c.Int("concurrency"), PollWait: c.Duration("poll-wait"), CallTimeout: c.Duration("call-timeout"),
				DrainTimeout: c.Duration("drain-timeout"),
				Logger:       hclog.New(&hclog.LoggerOptions{Name: c.String("process"), Output: os.Stderr, Level: hclog.Info}),
			})
		},
	}
}

// shellJobCommand is the command a shell worker (`leasehold worker run`)
// runs for each job, under a supervisor: workload.RunShellJob.
func shellJobCommand() *cli.Command {
	return &cli.Command{
		Name:   "shell-job",
		Usage:  "a shell worker's command for one job (run by `leasehold worker run`)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "history-dir", Required: true},
			&cli.StringFlag{Name: "sink", Required: true},
			&cli.StringFlag{Name: "deadline-file", Usage: "the worker's self-stop deadline (STATE_DIR/deadline)"},
			&cli.DurationFlag{Name: "renew"},
			&cli.DurationFlag{Name: "toleration"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := workload.ShellJobFromEnv(os.Stdin)
			if err != nil {
				return err
			}
			if cfg.Self, err = self(); err != nil {
				return err
			}
			cfg.HistoryDir, cfg.SinkURL, cfg.DeadlineFile = c.String("history-dir"), c.String("sink"), c.String("deadline-file")
			cfg.Renew, cfg.Toleration = c.Duration("renew"), c.Duration("toleration")
			if code := workload.RunShellJob(cfg); code != 0 {
				return cli.Exit("", code)
			}
			return nil
		},
	}
}

// shellWatchCommand is a shell-job's watcher: it records the command's
// stop if the command dies without recording it (SIGKILL). The pipe from
// the command is its file descriptor 3.
func shellWatchCommand() *cli.Command {
	return &cli.Command{
		Name:   "shell-watch",
		Usage:  "record a shell-job's stop when it is killed (started by shell-job)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "history", Required: true},
			&cli.StringFlag{Name: "process", Required: true},
			&cli.StringFlag{Name: "job-id", Required: true},
			&cli.Uint64Flag{Name: "token", Required: true},
			&cli.StringFlag{Name: "worker-id", Required: true},
			&cli.StringFlag{Name: "deadline-file"},
			&cli.DurationFlag{Name: "renew"},
			&cli.DurationFlag{Name: "toleration"},
		},
		Action: func(c *cli.Context) error {
			// Signals from a terminal or a session ending are not a stop of
			// the command's: only the pipe says when it ended.
			signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
			pipe := os.NewFile(3, "shell-job")
			defer pipe.Close()
			code := workload.RunShellWatch(workload.ShellWatchConfig{History: c.String("history"), Process: c.String("process"),
				Exec:         history.Exec{JobID: c.String("job-id"), Token: c.Uint64("token"), WorkerID: c.String("worker-id")},
				DeadlineFile: c.String("deadline-file"), Renew: c.Duration("renew"), Toleration: c.Duration("toleration")}, pipe)
			if code != 0 {
				return cli.Exit("", code)
			}
			return nil
		},
	}
}

// cleanCommand removes namespaces, links and rules left by runs whose
// runner was killed with SIGKILL.
func cleanCommand() *cli.Command {
	return &cli.Command{
		Name:  "clean",
		Usage: "remove network namespaces, links and tmpfs mounts left by runs that were killed",
		Action: func(*cli.Context) error {
			return errors.Join(netem.CleanLeftovers(), disk.CleanLeftovers())
		},
	}
}

func kindNames() string {
	var b strings.Builder
	for _, k := range nemesis.Catalog() {
		fmt.Fprintf(&b, "  %-24s %s\n", k.Name, k.Family)
	}
	return b.String()
}

// splitAll splits each value on commas and drops empty ones.
func splitAll(vs []string) []string {
	var out []string
	for _, v := range vs {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}
