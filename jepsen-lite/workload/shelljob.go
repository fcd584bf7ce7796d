package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// A shell worker is `leasehold worker run` taking the workload's jobs; the
// command it runs for each job, under a supervisor of its own, is
// `jepsen-lite shell-job` (RunShellJob). The command records its own
// execution in a history file of its own and writes to the sinks as a Go
// worker's handler does. A SIGKILL leaves it no time to record its stop,
// so before it starts it puts a watcher (`jepsen-lite shell-watch`,
// RunShellWatch) outside its process group: the watcher holds the read end
// of a pipe whose only writer is the command, and records the stop when
// the pipe closes without the command having said it recorded it. The
// pipe closes when the command's process has died, so the watcher's time
// is after the real stop, never before it: the checkers see the execution
// last at least as long as it did.

// ShellJobConfig is one command's: the job from the environment `worker
// run` gives its commands, and the run's places and timings from the
// command line the runner gave `worker run`.
type ShellJobConfig struct {
	JobID    string
	Token    uint64
	WorkerID string
	// RefFile is LEASEHOLD_REF_FILE: the ref to report.
	RefFile string
	// RetryAfterFile is LEASEHOLD_RETRY_AFTER_FILE: the delay a retryable
	// failure asks for (a snooze).
	RetryAfterFile string
	Payload        []byte
	// HistoryDir receives the command's history file (ShellHistoryFile).
	HistoryDir string
	SinkURL    string
	// DeadlineFile is the worker's self-stop deadline (STATE_DIR/deadline:
	// CLOCK_BOOTTIME nanoseconds) and Renew and Toleration the cluster's
	// timings: a stop records the deadline as last_ack_send_ns.
	DeadlineFile      string
	Renew, Toleration time.Duration
	// Self is the jepsen-lite binary, started as the watcher.
	Self   string
	Logger hclog.Logger
}

// ShellJobFromEnv reads the job from the environment `leasehold worker
// run` gives a command (and its payload from stdin).
func ShellJobFromEnv(stdin io.Reader) (ShellJobConfig, error) {
	token, err := strconv.ParseUint(os.Getenv("LEASEHOLD_FENCING_TOKEN"), 10, 64)
	if err != nil {
		return ShellJobConfig{}, fmt.Errorf("LEASEHOLD_FENCING_TOKEN: %w", err)
	}
	cfg := ShellJobConfig{JobID: os.Getenv("LEASEHOLD_JOB_ID"), Token: token, WorkerID: os.Getenv("LEASEHOLD_WORKER_ID"),
		RefFile: os.Getenv("LEASEHOLD_REF_FILE"), RetryAfterFile: os.Getenv("LEASEHOLD_RETRY_AFTER_FILE")}
	if cfg.JobID == "" || cfg.WorkerID == "" || token == 0 {
		return ShellJobConfig{}, errors.New("LEASEHOLD_JOB_ID, LEASEHOLD_FENCING_TOKEN and LEASEHOLD_WORKER_ID are required")
	}
	if cfg.Payload, err = io.ReadAll(stdin); err != nil {
		return ShellJobConfig{}, fmt.Errorf("payload: %w", err)
	}
	return cfg, nil
}

// ShellProcess is the history's process name of a shell worker's command:
// WORKER/TOKEN/PID. It names no worker process, so a fault that kills a
// `worker run` process (which the command outlives) does not end it.
func ShellProcess(worker string, token uint64, pid int) string {
	return fmt.Sprintf("%s/%d/%d", worker, token, pid)
}

// ShellHistoryFile is a command's history file name, under the run's
// directory (history-WORKER-cmd-TOKEN-PID.jsonl).
func ShellHistoryFile(worker string, token uint64, pid int) string {
	return fmt.Sprintf("history-%s-cmd-%d-%d.jsonl", worker, token, pid)
}

// watchDone is what the command writes to its watcher once it has recorded
// its stop.
const watchDone = 'x'

// RunShellJob runs one job as a shell worker's command and returns the
// exit status: 0 done (also after a SIGTERM, once the stop is recorded),
// 75 a scripted retryable failure, 1 a payload it cannot read or a
// command that could not record.
func RunShellJob(cfg ShellJobConfig) int {
	log := cfg.Logger
	if log == nil {
		log = hclog.New(&hclog.LoggerOptions{Name: "shell-job", Output: os.Stderr, Level: hclog.Info})
	}
	// SIGTERM from the supervisor (a cancel, a shutdown, a lost lease, the
	// deadline): stop, record the stop, exit.
	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stopSignals()
	pid := os.Getpid()
	process := ShellProcess(cfg.WorkerID, cfg.Token, pid)
	path := filepath.Join(cfg.HistoryDir, ShellHistoryFile(cfg.WorkerID, cfg.Token, pid))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		log.Error("history", "error", err)
		return 1
	}
	defer f.Close()
	rec := history.NewRecorder(f)
	exe := history.Exec{JobID: cfg.JobID, Token: cfg.Token, WorkerID: cfg.WorkerID}

	// The watcher first: from the recorded start on, the stop is recorded
	// whatever kills the command.
	r, w, err := os.Pipe()
	if err != nil {
		log.Error("watcher pipe", "error", err)
		return 1
	}
	watch := exec.Command(cfg.Self, "shell-watch", "--history", path, "--process", process, "--job-id", cfg.JobID,
		"--token", strconv.FormatUint(cfg.Token, 10), "--worker-id", cfg.WorkerID, "--deadline-file", cfg.DeadlineFile,
		"--renew", cfg.Renew.String(), "--toleration", cfg.Toleration.String())
	watch.ExtraFiles = []*os.File{r}
	// Its own process group: the supervisor's stop signals the command's
	// group only. No stdout or stderr of the command's: the supervisor
	// waits until nothing holds those open.
	watch.SysProcAttr = groupAttr()
	if err := watch.Start(); err != nil {
		log.Error("starting the watcher", "error", err)
		return 1
	}
	r.Close()
	go watch.Wait()
	if err := rec.Append(history.Entry{Kind: history.KindExecStart, Process: process, Exec: &exe}); err != nil {
		log.Error("history", "error", err)
		return 1
	}

	p, perr := DecodePayload(cfg.Payload)
	if perr != nil {
		p = Payload{RunMs: 0, WriteEveryMs: 1}
	}
	sinks := NewSinkClient(cfg.SinkURL)
	defer sinks.CloseIdle()
	p.writeFor(ctx, func(n int) { writeSinks(ctx, sinks, log, cfg.JobID, cfg.Token, cfg.WorkerID, n) })
	stop := exe
	stop.Cause = history.CauseCompleted
	if ctx.Err() != nil {
		stop.Cause = history.CauseSignalled
	}
	stop.LastAckSendNs = lastAckOfDeadline(cfg.DeadlineFile, cfg.Renew, cfg.Toleration)
	stop.RenewNs, stop.TolerationNs = int64(cfg.Renew), int64(cfg.Toleration)
	err = rec.Append(history.Entry{Kind: history.KindExecStop, Process: process, Exec: &stop})
	if err == nil {
		err = rec.Err()
	}
	if err != nil {
		// The watcher records the stop when we are gone.
		log.Error("history", "error", err)
		return 1
	}
	w.Write([]byte{watchDone})
	w.Close()
	switch {
	case perr != nil:
		log.Error("payload", "error", perr)
		return 1
	case p.Fail && stop.Cause == history.CauseCompleted:
		if p.SnoozeMs > 0 && cfg.RetryAfterFile != "" {
			if err := os.WriteFile(cfg.RetryAfterFile, []byte(p.snooze().String()+"\n"), 0o600); err != nil {
				log.Warn("retry after", "error", err)
			}
		}
		return 75 // EX_TEMPFAIL: failed, retryable (snoozed when it wrote a delay)
	}
	if cfg.RefFile != "" {
		if err := os.WriteFile(cfg.RefFile, []byte(fmt.Sprintf("ref-%s-%d\n", cfg.JobID, cfg.Token)), 0o600); err != nil {
			log.Warn("ref", "error", err)
		}
	}
	return 0
}

// ShellWatchConfig is a watcher's: the command's history file, process
// name and execution, and what its stop records.
type ShellWatchConfig struct {
	History, Process  string
	Exec              history.Exec
	DeadlineFile      string
	Renew, Toleration time.Duration
}

// RunShellWatch waits on pipe, the read end whose only writer is the
// command, and records the command's stop (killed_process) at the moment
// the pipe closes, unless the command wrote that it recorded its stop
// itself. It returns the exit status.
func RunShellWatch(cfg ShellWatchConfig, pipe io.Reader) int {
	var b [1]byte
	n, _ := pipe.Read(b[:])
	if n == 1 && b[0] == watchDone {
		return 0
	}
	at := history.Now()
	f, err := os.OpenFile(cfg.History, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shell-watch:", err)
		return 1
	}
	defer f.Close()
	stop := cfg.Exec
	stop.Cause = history.CauseKilledProcess
	stop.LastAckSendNs = lastAckOfDeadline(cfg.DeadlineFile, cfg.Renew, cfg.Toleration)
	stop.RenewNs, stop.TolerationNs = int64(cfg.Renew), int64(cfg.Toleration)
	rec := history.NewRecorder(f)
	if err := rec.Append(history.Entry{Kind: history.KindExecStop, Ns: at, Process: cfg.Process, Exec: &stop}); err != nil {
		fmt.Fprintln(os.Stderr, "shell-watch:", err)
		return 1
	}
	if err := rec.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "shell-watch:", err)
		return 1
	}
	return 0
}

// lastAckOfDeadline reads a worker's self-stop deadline (CLOCK_BOOTTIME
// nanoseconds: the send time of its last acknowledged heartbeat +
// toleration − 2 × renew) and returns that send time on the history's
// clock, so the checker's deadline (last_ack_send_ns + toleration − 2 ×
// renew) is the one the supervisor enforced. Zero when unknown.
func lastAckOfDeadline(path string, renew, toleration time.Duration) int64 {
	if path == "" || renew <= 0 || toleration <= 0 {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	d, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	off, ok := bootAhead()
	if !ok {
		return 0
	}
	return d - off - int64(toleration) + 2*int64(renew)
}

// writeSinks writes to both sinks, as a Go worker's handler does; a write
// in flight is abandoned when ctx ends.
func writeSinks(ctx context.Context, sinks *SinkClient, log hclog.Logger, jobID string, token uint64, worker string, n int) {
	for _, sink := range []string{history.SinkFenced, history.SinkUnfenced} {
		if ctx.Err() != nil {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, sinkTimeout)
		_, err := sinks.Write(wctx, SinkWrite{Sink: sink, JobID: jobID, Token: token, WorkerID: worker,
			Key: fmt.Sprintf("%s/%d/%d", jobID, token, n)})
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Warn("sink write failed", "sink", sink, "job_id", jobID, "token", token, "error", err)
		}
	}
}
