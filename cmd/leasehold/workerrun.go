package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
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
			"  LEASEHOLD_JOB_ID, LEASEHOLD_JOB_KIND, LEASEHOLD_JOB_QUEUE, LEASEHOLD_TOKEN, LEASEHOLD_ATTEMPT,\n" +
			"  LEASEHOLD_WORKER_ID, LEASEHOLD_PAYLOAD (when it is text under 32 KiB), LEASEHOLD_REF_FILE.\n" +
			"Exit 0 reports succeeded, 75 failed (retryable), anything else failed. A line written to\n" +
			"$LEASEHOLD_REF_FILE (a commit, an artifact URL) is reported as the output ref.\n" +
			"On a revoke or when the worker stops its own jobs (no acknowledged heartbeat), CMD's\n" +
			"process group gets SIGTERM, then SIGKILL after --kill-after.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "queue", Aliases: []string{"q"}, Value: cli.NewStringSlice("default")},
			&cli.StringSliceFlag{Name: "kind", Aliases: []string{"k"}, Value: cli.NewStringSlice("default", "run", "evaluation")},
			&cli.StringFlag{Name: "id", EnvVars: []string{"LEASEHOLD_WORKER_ID"}, Usage: "stable worker id (default: host name)"},
			&cli.IntFlag{Name: "concurrency", Aliases: []string{"n"}, Value: 1},
			&cli.DurationFlag{Name: "kill-after", Value: 10 * time.Second, Usage: "SIGKILL this long after SIGTERM"},
			&cli.DurationFlag{Name: "drain", Value: 30 * time.Second, Usage: "on shutdown, wait this long for running commands"},
			&cli.BoolFlag{Name: "once", Usage: "exit after the first job finishes"},
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
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			runner := &commandRunner{argv: argv, killAfter: c.Duration("kill-after"), worker: id}
			handler := runner.run
			if c.Bool("once") {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				handler = func(hctx context.Context, j *client.Job) (client.Result, error) {
					defer cancel()
					return runner.run(hctx, j)
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
			return ignoreCancel(w.Run(ctx))
		},
	}
}

// commandRunner runs one shell job.
type commandRunner struct {
	argv      []string
	killAfter time.Duration
	worker    string
}

func (r *commandRunner) run(ctx context.Context, j *client.Job) (client.Result, error) {
	refFile, err := os.CreateTemp("", "leasehold-ref-*")
	if err != nil {
		return client.Result{}, client.Retryable(err)
	}
	refFile.Close()
	defer os.Remove(refFile.Name())

	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Stdin = bytes.NewReader(j.Payload)
	cmd.Stdout = os.Stdout
	var stderr tailBuffer
	cmd.Stderr = &teeTail{w: os.Stderr, tail: &stderr}
	cmd.Env = append(os.Environ(),
		"LEASEHOLD_JOB_ID="+j.ID, "LEASEHOLD_JOB_KIND="+j.Kind, "LEASEHOLD_JOB_QUEUE="+j.Queue,
		"LEASEHOLD_TOKEN="+strconv.FormatUint(j.Token, 10), "LEASEHOLD_ATTEMPT="+strconv.FormatUint(uint64(j.Attempts)+1, 10),
		"LEASEHOLD_WORKER_ID="+r.worker, "LEASEHOLD_REF_FILE="+refFile.Name())
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
	ref := readRef(refFile.Name())
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
