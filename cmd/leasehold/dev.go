package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"
)

// Dev cluster addresses: the CLI's default endpoints are these API ports,
// so no flag is needed to talk to `leasehold dev`.
var (
	devAPI  = []string{"127.0.0.1:7701", "127.0.0.1:7702", "127.0.0.1:7703"}
	devRaft = []string{"127.0.0.1:7711", "127.0.0.1:7712", "127.0.0.1:7713"}
)

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run a real 3-node cluster on loopback (data in a temporary directory)",
		Description: "Three nodes, each with its own Raft log on disk, its own Raft port and API port,\n" +
			"elect a leader and serve until Ctrl-C. With --demo, it also submits jobs, runs\n" +
			"workers, kills and restarts the leader, and tells what happened.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Usage: "keep data here", DefaultText: "a temporary directory, removed on exit"},
			&cli.BoolFlag{Name: "demo", Usage: "run the failover demo (timings 0.5 s / 2 s / 5 s unless the timing flags are given)"},
			&cli.Float64Flag{Name: "renew-seconds", Value: 1, Usage: "workers heartbeat this often, in seconds; times --timing-scale"},
			&cli.Float64Flag{Name: "grace-seconds", Value: 5, Usage: "a worker silent this long is unreachable, in seconds; times --timing-scale"},
			&cli.Float64Flag{Name: "toleration-seconds", Value: 15, Usage: "a worker silent this long loses its leases, in seconds; times --timing-scale"},
			timingScaleFlag(nil),
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "node logs: off, error, warn, info, debug"},
			&cli.StringFlag{Name: "log-file", Usage: "append the nodes' logs here", DefaultText: "leasehold-dev.log in --data-dir, or in the system's temporary directory"},
			&cli.BoolFlag{Name: "log-json", Usage: "log one JSON object per line"},
		},
		Action: func(c *cli.Context) error {
			scale := c.Float64("timing-scale")
			if err := checkTimingScale(scale); err != nil {
				return err
			}
			dir, logDir := c.String("data-dir"), c.String("data-dir")
			if dir == "" {
				// The log outlives a temporary data dir: it may explain
				// what the cluster did after it is gone.
				logDir = os.TempDir()
				tmp, err := os.MkdirTemp("", "leasehold-dev-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(tmp)
				dir = tmp
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			// The nodes log to a file, not over the banner and the demo's
			// story; the banner says where.
			logger, logPath := hclog.NewNullLogger(), ""
			if level := c.String("log-level"); level != "off" {
				logPath = c.String("log-file")
				if logPath == "" {
					logPath = filepath.Join(logDir, "leasehold-dev.log")
				}
				if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
					return err
				}
				f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
				if err != nil {
					return err
				}
				defer f.Close()
				logger = newLogger(level, c.Bool("log-json"), f)
			}
			d := &devCluster{dir: dir, logger: logger, scale: scale,
				renew: c.Float64("renew-seconds"), grace: c.Float64("grace-seconds"), toleration: c.Float64("toleration-seconds")}
			if c.Bool("demo") && !c.IsSet("renew-seconds") && !c.IsSet("grace-seconds") && !c.IsSet("toleration-seconds") {
				d.renew, d.grace, d.toleration = 0.5, 2, 5
			}
			if err := d.start(); err != nil {
				d.stopAll()
				return err
			}
			defer d.stopAll()
			fmt.Printf("leasehold dev: 3 nodes, data in %s\n", dir)
			for i := range devAPI {
				fmt.Printf("  node-%d  api %s  raft %s\n", i+1, devAPI[i], devRaft[i])
			}
			fmt.Printf("  timings: renew %gs, grace %gs, toleration %gs", d.renew*scale, d.grace*scale, d.toleration*scale)
			if scale != 1 {
				fmt.Printf(" (--timing-scale %g)", scale)
			}
			fmt.Println()
			if logPath != "" {
				fmt.Printf("  logs: %s (at %s)\n", logPath, c.String("log-level"))
			}
			fmt.Printf("try: leasehold cluster status; leasehold job submit --payload hello; leasehold worker run -- cat\n")
			if c.Bool("demo") {
				return runDemo(ctx, d)
			}
			<-ctx.Done()
			fmt.Println("\nleasehold dev: stopping")
			return nil
		},
	}
}

// devCluster is the three nodes of `leasehold dev`, in this process.
type devCluster struct {
	dir                      string
	logger                   hclog.Logger
	renew, grace, toleration float64 // before scale
	scale                    float64 // --timing-scale
	nodes                    [3]*runningNode
}

func (d *devCluster) config(i int) ServerConfig {
	cfg := defaultServerConfig()
	cfg.NodeID = fmt.Sprintf("node-%d", i+1)
	cfg.DataDir = filepath.Join(d.dir, cfg.NodeID)
	cfg.RaftBind, cfg.APIBind = devRaft[i], devAPI[i]
	cfg.BootstrapExpect, cfg.Join = 3, devRaft[:]
	cfg.Plugins.Executor.RenewSeconds, cfg.Plugins.Executor.GraceSeconds = d.renew, d.grace
	cfg.Plugins.Executor.TolerationSeconds = d.toleration
	for _, k := range []string{"renew_seconds", "grace_seconds", "toleration_seconds"} {
		cfg.markSet("plugins.executor." + k)
	}
	// The Raft timeouts are the defaults (300 ms, a snappy failover),
	// fitted within a quarter of grace; all of it times the scale.
	cfg.timingScale = d.scale
	return cfg
}

func (d *devCluster) start() error {
	for i := range d.nodes {
		if err := d.startNode(i); err != nil {
			return err
		}
	}
	return nil
}

func (d *devCluster) startNode(i int) error {
	n, err := startNode(d.config(i), d.logger.Named(fmt.Sprintf("node-%d", i+1)))
	if err != nil {
		return portTakenHint(err)
	}
	d.nodes[i] = n
	return nil
}

// portTakenHint says why a dev port is likely taken: the dev ports are
// fixed, so the usual holder is another `leasehold dev`.
func portTakenHint(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w (is another leasehold dev running?)", err)
	}
	return err
}

// kill stops node i without handing leadership over, as a crash would.
func (d *devCluster) kill(i int) {
	if n := d.nodes[i]; n != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n.http.Shutdown(ctx)
		cancel()
		n.node.Kill()
		d.nodes[i] = nil
	}
}

func (d *devCluster) stopAll() {
	for i, n := range d.nodes {
		if n != nil {
			n.stop(5 * time.Second)
			d.nodes[i] = nil
		}
	}
}

// leader returns the index of the node that leads, or -1.
func (d *devCluster) leader() int {
	for i, n := range d.nodes {
		if n != nil && n.node.Status().State == "Leader" && n.node.Status().Ready {
			return i
		}
	}
	return -1
}
