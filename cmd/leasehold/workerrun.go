package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// ExitRetryable is the exit status a command uses to say "failed, try
// again" (EX_TEMPFAIL).
const ExitRetryable = 75

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
			"written to $LEASEHOLD_REF_FILE (a commit, an artifact URL) is reported as the output ref; the\n" +
			"file lives in the state directory (--state-dir) and is removed once the job is reported.\n" +
			"Signals to CMD's process group: `job cancel` and a worker shutdown past --drain send SIGTERM,\n" +
			"then SIGKILL after --kill-after; `job kill` sends SIGKILL at once; a lost lease (or the worker\n" +
			"stopping its own jobs because no heartbeat was acknowledged) sends SIGTERM then SIGKILL at once.\n" +
			"With --once the worker exits after its first job with that job's outcome: 0 succeeded, 75\n" +
			"failed and retryable, 1 anything else.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "queue", Aliases: []string{"q"}, Value: cli.NewStringSlice("default")},
			&cli.StringSliceFlag{Name: "kind", Aliases: []string{"k"}, Value: cli.NewStringSlice("default", "run", "evaluation")},
			&cli.StringFlag{Name: "id", EnvVars: []string{"LEASEHOLD_WORKER_ID"}, Usage: "stable worker id (default: host name)"},
			&cli.IntFlag{Name: "concurrency", Aliases: []string{"n"}, Value: 1},
			&cli.DurationFlag{Name: "kill-after", Value: 10 * time.Second, Usage: "SIGKILL this long after SIGTERM"},
			&cli.DurationFlag{Name: "drain", Value: 30 * time.Second, Usage: "on shutdown, wait this long for running commands"},
			&cli.BoolFlag{Name: "once", Usage: "exit after the first job finishes, with its outcome (0, 75 or 1)"},
			&cli.StringFlag{Name: "state-dir", EnvVars: []string{"LEASEHOLD_STATE_DIR"},
				Usage: "the worker's files (each job's ref file) (default: $XDG_STATE_HOME/leasehold/ID, or ~/.local/state/leasehold/ID)"},
			&cli.StringFlag{Name: "log-level", Value: "info"},
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
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			runner := &commandRunner{argv: argv, killAfter: c.Duration("kill-after"), worker: id, stateDir: stateDir,
				env: childEnv(lookup(c, "endpoints").StringSlice("endpoints"), flagString(c, "token"))}
			handler := runner.run
			var onceOutcome atomic.Int32 // the job's exit status, with --once
			if c.Bool("once") {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				onceOutcome.Store(-1)
				handler = func(hctx context.Context, j *client.Job) (client.Result, error) {
					defer cancel()
					res, err := runner.run(hctx, j)
					onceOutcome.Store(int32(exitStatusOf(res, err)))
					return res, err
				}
			}
			handlers := map[string]client.Handler{}
			for _, k := range splitList(c.StringSlice("kind")) {
				handlers[k] = handler
			}
			w, err := client.NewWorker(client.WorkerOptions{
				Client: cl, ID: id, Queues: splitList(c.StringSlice("queue")), Concurrency: c.Int("concurrency"),
				Handlers: handlers, DrainTimeout: c.Duration("drain"),
				Logger: hclog.New(&hclog.LoggerOptions{Name: "worker", Level: hclog.LevelFromString(c.String("log-level")), Output: os.Stderr}),
			})
			if err != nil {
				return err
			}
			if err := ignoreCancel(w.Run(ctx)); err != nil {
				return err
			}
			if code := onceOutcome.Load(); code > 0 {
				return cli.Exit("", int(code))
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
		return ExitRetryable
	default:
		return 1
	}
}

// workerStateDir is the worker's own directory of files: dir when given,
// else $XDG_STATE_HOME/leasehold/ID or ~/.local/state/leasehold/ID. Files
// of jobs a previous run of this worker left (it was killed before it could
// remove them) are removed: their leases were released or will expire.
func workerStateDir(dir, id string) (string, error) {
	if dir == "" {
		base := os.Getenv("XDG_STATE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("--state-dir: no default: %w", err)
			}
			base = filepath.Join(home, ".local", "state")
		}
		dir = filepath.Join(base, "leasehold", id)
	}
	jobs := filepath.Join(dir, "jobs")
	if err := os.RemoveAll(jobs); err != nil {
		return "", fmt.Errorf("--state-dir %s: %w", dir, err)
	}
	if err := os.MkdirAll(jobs, 0o700); err != nil {
		return "", fmt.Errorf("--state-dir %s: %w", dir, err)
	}
	return dir, nil
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

// commandRunner runs one shell job.
type commandRunner struct {
	argv      []string
	killAfter time.Duration
	worker    string
	stateDir  string   // the job's files go in stateDir/jobs/TOKEN
	env       []string // the worker's part of the command's environment
}

func (r *commandRunner) run(ctx context.Context, j *client.Job) (client.Result, error) {
	jobDir := filepath.Join(r.stateDir, "jobs", strconv.FormatUint(j.Token, 10))
	if err := os.MkdirAll(jobDir, 0o700); err != nil {
		return client.Result{}, client.Retryable(err)
	}
	defer os.RemoveAll(jobDir)
	refFile := filepath.Join(jobDir, "ref")
	if err := os.WriteFile(refFile, nil, 0o600); err != nil {
		return client.Result{}, client.Retryable(err)
	}

	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Stdin = bytes.NewReader(j.Payload)
	cmd.Stdout = os.Stdout
	var stderr tailBuffer
	cmd.Stderr = &teeTail{w: os.Stderr, tail: &stderr}
	cmd.Env = append(slices.Clip(r.env),
		"LEASEHOLD_JOB_ID="+j.ID, "LEASEHOLD_JOB_KIND="+j.Kind, "LEASEHOLD_JOB_QUEUE="+j.Queue,
		"LEASEHOLD_FENCING_TOKEN="+strconv.FormatUint(j.Token, 10), "LEASEHOLD_ATTEMPT="+strconv.FormatUint(uint64(j.Attempts)+1, 10),
		"LEASEHOLD_WORKER_ID="+r.worker, "LEASEHOLD_REF_FILE="+refFile)
	if len(j.Payload) < 32<<10 && utf8.Valid(j.Payload) && !bytes.ContainsRune(j.Payload, 0) {
		cmd.Env = append(cmd.Env, "LEASEHOLD_PAYLOAD="+string(j.Payload))
	}
	// Its own process group, so a stop reaches whatever the command started;
	// and killed with the worker, so a crashed worker leaves no job running
	// that its restart would hand to someone else. The parent-death signal
	// follows the thread that started the child: keep this goroutine on it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A process that leaves the group but keeps stderr open must not keep
	// the job "running" forever.
	cmd.WaitDelay = r.killAfter
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return client.Result{Outcome: pb.Outcome_OUTCOME_FAILED, Message: err.Error()}, nil
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		// Revoked or shutting down: SIGTERM the group, then SIGKILL after
		// --kill-after. Lost (or stopped by the worker itself): the lease
		// is ending now, so there is no time for a graceful stop.
		// Killed: SIGKILL at once, nothing graceful.
		var rev *client.RevokedError
		if errors.As(context.Cause(ctx), &rev) && rev.Kill {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			waitErr = <-done
			break
		}
		grace := r.killAfter
		if errors.Is(context.Cause(ctx), client.ErrLeaseLost) {
			grace = 0
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case waitErr = <-done:
		case <-time.After(grace):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			waitErr = <-done
		}
	}
	ref := readRef(refFile)
	if cause := context.Cause(ctx); ctx.Err() != nil {
		if errors.Is(cause, client.ErrShutdown) {
			// Nobody cancelled the job: the worker is stopping. An error
			// makes the runtime release the lease, so the job runs again
			// elsewhere without using an attempt.
			return client.Result{}, cause
		}
		outcome := pb.Outcome_OUTCOME_CANCELLED
		var rev *client.RevokedError
		if errors.As(cause, &rev) && rev.Kill {
			outcome = pb.Outcome_OUTCOME_KILLED
		}
		return client.Result{Outcome: outcome, Ref: ref, Message: "stopped: " + cause.Error()}, nil
	}
	var exit *exec.ExitError
	switch {
	case waitErr == nil:
		return client.Result{Outcome: pb.Outcome_OUTCOME_SUCCEEDED, Ref: ref}, nil
	case errors.As(waitErr, &exit) && exit.ExitCode() == ExitRetryable:
		return client.Result{Outcome: pb.Outcome_OUTCOME_FAILED, Retryable: true, Ref: ref, Message: stderr.message(waitErr)}, nil
	default:
		return client.Result{Outcome: pb.Outcome_OUTCOME_FAILED, Ref: ref, Message: stderr.message(waitErr)}, nil
	}
}

// readRef returns the first line of the ref file, bounded.
func readRef(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSpace(line)
	if len(line) > 1024 || !utf8.ValidString(line) {
		return ""
	}
	return line
}

// tailBuffer keeps the last 2 KiB of a command's stderr for the report.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

// message is the exit status and the stderr tail, cleaned of control
// characters (the API refuses them in a report's message).
func (t *tailBuffer) message(err error) string {
	tail := strings.Map(func(r rune) rune {
		if r < ' ' && r != '\n' && r != '\t' || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(strings.TrimSpace(string(t.b)), ""))
	if tail == "" {
		return err.Error()
	}
	return err.Error() + ": " + tail
}

type teeTail struct {
	w    *os.File
	tail *tailBuffer
}

func (t *teeTail) Write(p []byte) (int, error) {
	t.tail.Write(p)
	return t.w.Write(p)
}
