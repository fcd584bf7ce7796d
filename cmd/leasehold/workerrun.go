package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/supervisor"
	"github.com/leasehold/leasehold/clock"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

func workerRunCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run CMD for each job this worker takes",
		ArgsUsage: "-- CMD [ARGS...]",
		Description: "Each job runs CMD with the payload on stdin and in the environment:\n" +
			"  LEASEHOLD_JOB_ID, LEASEHOLD_JOB_KIND, LEASEHOLD_JOB_QUEUE, LEASEHOLD_FENCING_TOKEN (the lease's\n" +
			"  token), LEASEHOLD_ATTEMPT (1 for the first execution), LEASEHOLD_WORKER_ID, LEASEHOLD_PAYLOAD\n" +
			"  (when it is text under 32 KiB), LEASEHOLD_REF_FILE, and the worker's LEASEHOLD_ENDPOINTS and\n" +
			"  LEASEHOLD_TOKEN (its bearer token), so CMD can run `leasehold lease check \"$LEASEHOLD_JOB_ID\"\n" +
			"  \"$LEASEHOLD_FENCING_TOKEN\"`.\n" +
			"Exit 0 reports succeeded, 75 (EX_TEMPFAIL) failed and retryable, anything else failed. A line\n" +
			"written to $LEASEHOLD_REF_FILE (a commit, an artifact URL) is reported as the output ref. The\n" +
			"last line written to $LEASEHOLD_PROGRESS_FILE (\"step 3 of 5\"; at most 256 bytes are sent) is the\n" +
			"job's progress note: it goes with the next heartbeat and `job get` shows it (the leader keeps\n" +
			"it in memory only).\n" +
			"\n" +
			"Commands outlive the worker. Each runs under a supervisor process of its own (in its own\n" +
			"session) that waits for it and writes its exit status, stderr tail and ref into the worker's\n" +
			"state directory (--state-dir; jobs/TOKEN/ holds the job's files until it is reported). A worker\n" +
			"restarted with the same --id re-attaches: it lists its leases, finds each job's supervisor,\n" +
			"heartbeats the lease again and reports the command's result under the same token. A job whose\n" +
			"command is gone (the machine rebooted) is settled by its kind: an evaluation is released to the\n" +
			"queue; a run-style job's lease is released as lost, so the job ends lost (\"worker lost\", no\n" +
			"attempt counted) and never runs twice.\n" +
			"At every acknowledged heartbeat the worker writes its self-stop deadline into the state\n" +
			"directory; while the worker is down, a supervisor whose deadline passes stops its command\n" +
			"(SIGTERM, then SIGKILL) before the lease can expire.\n" +
			"\n" +
			"Signals to CMD's process group: `job cancel` and a worker shutdown past --drain send SIGTERM,\n" +
			"then SIGKILL after --kill-after; `job kill`, and a job's --timeout passing, send SIGKILL at\n" +
			"once (after a cancel too); a lost\n" +
			"lease, or the self-stop deadline (no heartbeat acknowledged), sends SIGTERM then SIGKILL at\n" +
			"once. A SIGKILLed worker leaves its commands running under their supervisors until it comes\n" +
			"back or the deadline passes.\n" +
			"With --once the worker exits after its first job with that job's outcome: 0 succeeded, 75\n" +
			"failed and retryable, 1 anything else.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "queue", Aliases: []string{"q"}, Value: cli.NewStringSlice("default"), Usage: "queues to take jobs from (repeat or comma-separate)"},
			&cli.StringSliceFlag{Name: "kind", Aliases: []string{"k"}, Value: cli.NewStringSlice("default", "run", "evaluation"), Usage: "job kinds to take (repeat or comma-separate)"},
			&cli.StringFlag{Name: "id", EnvVars: []string{"LEASEHOLD_WORKER_ID"}, Usage: "stable worker id (default: host name)"},
			&cli.IntFlag{Name: "concurrency", Aliases: []string{"n"}, Value: 1, Usage: "jobs run at once"},
			&cli.DurationFlag{Name: "kill-after", Value: 10 * time.Second, Usage: "SIGKILL this long after SIGTERM"},
			&cli.DurationFlag{Name: "drain", Value: 30 * time.Second, Usage: "on shutdown, wait this long for running commands"},
			&cli.BoolFlag{Name: "once", Usage: "exit after the first job finishes, with its outcome (0, 75 or 1)"},
			&cli.StringFlag{Name: "state-dir", EnvVars: []string{"LEASEHOLD_STATE_DIR"},
				Usage: "the worker's state: each job's files and supervisor, the self-stop deadline (default: $XDG_STATE_HOME/leasehold/ID, or ~/.local/state/leasehold/ID)"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "trace, debug, info, warn or error (logs go to stderr)"},
		},
		Action: func(c *cli.Context) error {
			argv := c.Args().Slice()
			if len(argv) == 0 {
				return fmt.Errorf("usage: leasehold worker run [flags] -- CMD [ARGS...]")
			}
			id := c.String("id")
			if id == "" {
				host, err := os.Hostname()
				if err != nil {
					return err
				}
				id = host
			}
			stateDir, err := workerStateDir(c.String("state-dir"), id)
			if err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding the leasehold binary to run supervisors: %w", err)
			}
			logger := hclog.New(&hclog.LoggerOptions{Name: "worker", Level: hclog.LevelFromString(c.String("log-level")), Output: os.Stderr})
			runner, err := supervisor.NewRunner(supervisor.Options{
				Dir: stateDir, Argv: argv, Supervise: []string{self, "supervise"},
				Env:      childEnv(lookup(c, "endpoints").StringSlice("endpoints"), flagString(c, "token")),
				WorkerID: id, KillAfter: c.Duration("kill-after"), Logger: logger.Named("supervisor"),
			})
			if err != nil {
				return fmt.Errorf("--state-dir %s: %w", stateDir, err)
			}
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()

			// Files of leases that ended while the worker was away go first;
			// the runtime re-attaches to the rest.
			if grants, err := cl.Leases(ctx, id); err == nil {
				live := map[uint64]bool{}
				for _, g := range grants {
					live[g.GetLease().GetToken()] = true
				}
				runner.RemoveStale(live)
			} else {
				logger.Warn("listing leases to clean the state directory failed", "error", err)
			}

			handler, reattach := client.Handler(runner.Run), runner.Reattach
			var onceOutcome atomic.Int32 // the job's exit status, with --once
			if c.Bool("once") {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				once := func(h client.Handler) client.Handler {
					return func(hctx context.Context, j *client.Job) (client.Result, error) {
						defer cancel()
						res, err := h(hctx, j)
						onceOutcome.Store(int32(exitStatusOf(res, err)))
						return res, err
					}
				}
				handler = once(handler)
				reattach = func(ctx context.Context, j *client.Job) (client.Handler, bool) {
					h, ok := runner.Reattach(ctx, j)
					if !ok {
						return nil, false
					}
					return once(h), true
				}
			}
			handlers := map[string]client.Handler{}
			for _, k := range splitList(c.StringSlice("kind")) {
				handlers[k] = handler
			}
			w, err := client.NewWorker(client.WorkerOptions{
				Client: cl, ID: id, Queues: splitList(c.StringSlice("queue")), Concurrency: c.Int("concurrency"),
				Handlers: handlers, DrainTimeout: c.Duration("drain"),
				Reattach: reattach, Deadline: runner.WriteDeadline, Clock: clock.System(),
				Logger: logger,
			})
			if err != nil {
				return err
			}
			err = ignoreCancel(w.Run(ctx))
			runner.RemoveFinished()
			if err != nil {
				return err
			}
			if code := onceOutcome.Load(); code > 0 {
				return cli.Exit("", int(code))
			}
			return nil
		},
	}
}

// superviseCommand is the hidden `leasehold supervise`, the process `worker
// run` starts per job (client/supervisor).
func superviseCommand() *cli.Command {
	return &cli.Command{
		Name:      "supervise",
		Hidden:    true,
		Usage:     "run one job's command for `worker run` (internal)",
		ArgsUsage: "-- CMD [ARGS...]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "job-dir", Required: true},
			&cli.StringFlag{Name: "deadline-file", Required: true},
			&cli.DurationFlag{Name: "kill-after", Value: 10 * time.Second},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return fmt.Errorf("%w: leasehold supervise --job-dir DIR --deadline-file FILE -- CMD [ARGS...]", errUsage)
			}
			code := supervisor.Supervise(supervisor.SuperviseOptions{
				JobDir: c.String("job-dir"), DeadlineFile: c.String("deadline-file"),
				KillAfter: c.Duration("kill-after"), Argv: c.Args().Slice(),
			})
			if code != 0 {
				return cli.Exit("", code)
			}
			return nil
		},
	}
}

// exitStatusOf is `worker run --once`'s exit status for a job's result:
// 0 succeeded, 75 a retryable failure, 1 anything else (a failure, a
// cancel or kill, a job that did not finish).
func exitStatusOf(res client.Result, err error) int {
	switch {
	case err != nil:
		return 1
	case res.Outcome == pb.Outcome_OUTCOME_SUCCEEDED || res.Outcome == pb.Outcome_OUTCOME_UNSPECIFIED:
		return 0
	case res.Outcome == pb.Outcome_OUTCOME_FAILED && res.Retryable:
		return supervisor.ExitRetryable
	default:
		return 1
	}
}

// workerStateDir is the worker's state directory: dir when given, else
// $XDG_STATE_HOME/leasehold/ID or ~/.local/state/leasehold/ID.
func workerStateDir(dir, id string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("--state-dir: no default: %w", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "leasehold", id), nil
}

// childEnv is the worker's environment for its commands: its own, with
// LEASEHOLD_ENDPOINTS and LEASEHOLD_TOKEN set to what the worker talks to
// the cluster with, so a command can call the CLI as the worker does.
func childEnv(endpoints []string, token string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "LEASEHOLD_ENDPOINTS=") || strings.HasPrefix(kv, "LEASEHOLD_TOKEN=")
	})
	env = append(env, "LEASEHOLD_ENDPOINTS="+strings.Join(endpoints, ","))
	if token != "" {
		env = append(env, "LEASEHOLD_TOKEN="+token)
	}
	return env
}
