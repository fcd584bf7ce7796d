package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/leasehold/leasehold/client"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

// ExitRetryable is the exit status a command uses to say "failed, try
// again" (EX_TEMPFAIL). With it, a duration the command wrote to
// $LEASEHOLD_RETRY_AFTER_FILE ("30s", "5m") is the wait before the next
// attempt, in place of the job's retry policy: a snooze.
const ExitRetryable = 75

// startBound is how long a supervisor may take to record itself after the
// worker started it.
const startBound = time.Second

// Options configure a Runner.
type Options struct {
	// Dir is the worker's state directory. Required.
	Dir string
	// Argv is the command each job runs. Required.
	Argv []string
	// Supervise is how to start a supervisor: a program and its first
	// arguments, to which "--job-dir DIR --deadline-file FILE --kill-after
	// D -- ARGV..." are added (the leasehold binary and "supervise").
	// Required.
	Supervise []string
	// Env is the worker's part of each command's environment (the job's
	// variables are added to it).
	Env []string
	// WorkerID is the worker's id, LEASEHOLD_WORKER_ID.
	WorkerID string
	// KillAfter is the grace between SIGTERM and SIGKILL on a cancel.
	KillAfter time.Duration
	// Logger. Default hclog.Default().Named("supervisor").
	Logger hclog.Logger
}

// Runner is the worker's side: it starts a supervisor per job and waits for
// its result (Run, a client.Handler), re-attaches to supervisors a previous
// run of the worker left (Reattach, for client.WorkerOptions.Reattach), and
// writes the self-stop deadline for them (WriteDeadline, for
// client.WorkerOptions.Deadline).
type Runner struct {
	o   Options
	log hclog.Logger

	mu   sync.Mutex
	acks uint64 // WriteDeadline calls
	// finished holds the directories of jobs whose result went to the
	// runtime, with acks at that moment. A directory stays until two
	// heartbeats were acknowledged since (the report, sent right after,
	// has got through by then), so a worker killed before its report
	// finds the result again after a restart and reports it.
	finished map[string]uint64
}

// errUnsupported: the supervisor needs Linux (sessions, process groups,
// user signals, and /proc to tell a process from a reused pid).
var errUnsupported = fmt.Errorf("supervisor: needs Linux (process groups, signals and /proc), not %s: %w", runtime.GOOS, errors.ErrUnsupported)

// supported is whether this platform can run a supervisor.
func supported() bool { return runtime.GOOS == "linux" }

// NewRunner checks o and creates the state directory. Off Linux it fails
// with an error matching errors.ErrUnsupported.
func NewRunner(o Options) (*Runner, error) {
	if !supported() {
		return nil, errUnsupported
	}
	if o.Dir == "" || len(o.Argv) == 0 || len(o.Supervise) == 0 {
		return nil, errors.New("supervisor: Dir, Argv and Supervise are required")
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, jobsDir), 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = hclog.Default().Named("supervisor")
	}
	return &Runner{o: o, log: log, finished: map[string]uint64{}}, nil
}

func (r *Runner) jobDir(token uint64) string {
	return filepath.Join(r.o.Dir, jobsDir, strconv.FormatUint(token, 10))
}

// WriteDeadline writes the self-stop deadline, a reading of
// clock.System (CLOCK_BOOTTIME on Linux), where the supervisors read
// it.
func (r *Runner) WriteDeadline(deadline time.Time) {
	err := writeFileAtomic(filepath.Join(r.o.Dir, deadlineFile), []byte(strconv.FormatInt(deadline.UnixNano(), 10)+"\n"))
	if err != nil {
		r.log.Error("writing the self-stop deadline for the supervisors failed", "error", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks++
	for dir, at := range r.finished {
		if r.acks-at >= 2 {
			os.RemoveAll(dir)
			delete(r.finished, dir)
		}
	}
}

// finish records that a job's result went to the runtime.
func (r *Runner) finish(dir string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished[dir] = r.acks
}

// RemoveFinished removes the files of every job whose result went to the
// runtime; for after the worker's Run returned, when every report has been
// made.
func (r *Runner) RemoveFinished() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for dir := range r.finished {
		os.RemoveAll(dir)
		delete(r.finished, dir)
	}
}

// RemoveStale removes the files of jobs that are not among live (tokens of
// the leases the cluster lists for this worker), after stopping any command
// still running there: those leases ended while the worker was away.
func (r *Runner) RemoveStale(live map[uint64]bool) {
	entries, _ := os.ReadDir(filepath.Join(r.o.Dir, jobsDir))
	for _, e := range entries {
		token, err := strconv.ParseUint(e.Name(), 10, 64)
		if err == nil && live[token] {
			continue
		}
		dir := filepath.Join(r.o.Dir, jobsDir, e.Name())
		var rec Record
		if readJSON(filepath.Join(dir, supervisorFile), &rec) == nil {
			rec.Command.signalGroup(syscall.SIGKILL)
		}
		os.RemoveAll(dir)
	}
}

// Run is a client.Handler: it runs the job's command under a new
// supervisor and returns its result. A supervisor that dies without one
// (killed) leaves a job settled by its kind: a run-style job is settled
// as lost (client.ErrExecutionLost), an evaluation fails retryably.
func (r *Runner) Run(ctx context.Context, j *client.Job) (client.Result, error) {
	dir := r.jobDir(j.Token)
	defer r.finish(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return client.Result{}, client.Retryable(err)
	}
	if err := os.WriteFile(filepath.Join(dir, payloadFile), j.Payload, 0o600); err != nil {
		return client.Result{}, client.Retryable(err)
	}
	for _, f := range []string{refFile, retryAfterFile, progressFile} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			return client.Result{}, client.Retryable(err)
		}
	}
	args := append(append([]string(nil), r.o.Supervise[1:]...),
		"--job-dir", dir, "--deadline-file", filepath.Join(r.o.Dir, deadlineFile),
		"--kill-after", r.o.KillAfter.String(), "--")
	cmd := exec.Command(r.o.Supervise[0], append(args, r.o.Argv...)...)
	cmd.Env = r.env(j, dir)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// A session of its own and no parent-death signal: the supervisor,
	// and so the command, outlives this worker.
	cmd.SysProcAttr = sessionAttr()
	if err := cmd.Start(); err != nil {
		return client.Result{Outcome: pb.Outcome_OUTCOME_FAILED, Message: "starting the supervisor: " + err.Error()}, nil
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	sup := Process{PID: cmd.Process.Pid}
	if p, err := processOf(sup.PID); err == nil {
		sup = p
	}
	return r.wait(ctx, j, dir, sup, exited)
}

// env is the command's environment.
func (r *Runner) env(j *client.Job, dir string) []string {
	env := append(append([]string(nil), r.o.Env...),
		"LEASEHOLD_JOB_ID="+j.ID, "LEASEHOLD_JOB_KIND="+j.Kind, "LEASEHOLD_JOB_QUEUE="+j.Queue,
		"LEASEHOLD_FENCING_TOKEN="+strconv.FormatUint(j.Token, 10),
		"LEASEHOLD_ATTEMPT="+strconv.FormatUint(uint64(j.Attempts)+1, 10),
		"LEASEHOLD_WORKER_ID="+r.o.WorkerID, "LEASEHOLD_REF_FILE="+filepath.Join(dir, refFile),
		"LEASEHOLD_RETRY_AFTER_FILE="+filepath.Join(dir, retryAfterFile),
		"LEASEHOLD_PROGRESS_FILE="+filepath.Join(dir, progressFile))
	if len(j.Payload) < 32<<10 && utf8.Valid(j.Payload) && !bytes.ContainsRune(j.Payload, 0) {
		env = append(env, "LEASEHOLD_PAYLOAD="+string(j.Payload))
	}
	return env
}

// Reattach is for client.WorkerOptions.Reattach: a job whose supervisor is
// still there, or whose command ended with a result, gets a handler that
// waits for (or returns) that result under the job's lease. A job whose
// command is gone is settled by its kind: an evaluation (requeued when its
// worker is lost) is released, false; a run-style job gets a handler that
// returns client.ErrExecutionLost, so the worker settles its lease as a
// lost worker's (the job ends lost, no attempt counted), since the command
// may have done part of its work and must not run again.
func (r *Runner) Reattach(ctx context.Context, j *client.Job) (client.Handler, bool) {
	dir := r.jobDir(j.Token)
	var res Result
	var rec Record
	resErr := readJSON(filepath.Join(dir, resultFile), &res)
	recErr := readJSON(filepath.Join(dir, supervisorFile), &rec)
	if _, err := os.Stat(filepath.Join(dir, payloadFile)); err == nil && resErr != nil && recErr != nil {
		// The worker died just after it started the supervisor, which
		// records itself first thing: give it a moment.
		for end := time.Now().Add(startBound); recErr != nil && time.Now().Before(end) && ctx.Err() == nil; {
			time.Sleep(pollEvery)
			recErr = readJSON(filepath.Join(dir, supervisorFile), &rec)
		}
		resErr = readJSON(filepath.Join(dir, resultFile), &res)
	}
	switch {
	case resErr == nil && res.Stopped != "deadline":
		r.log.Info("re-attached to a job whose command ended while the worker was away", "job_id", j.ID, "token", j.Token)
		return func(ctx context.Context, j *client.Job) (client.Result, error) {
			defer r.finish(dir)
			return r.resultOf(ctx, res)
		}, true
	case resErr != nil && recErr == nil && rec.Supervisor.Alive():
		r.log.Info("re-attached to a running job's supervisor", "job_id", j.ID, "token", j.Token, "supervisor_pid", rec.Supervisor.PID)
		return func(ctx context.Context, j *client.Job) (client.Result, error) {
			defer r.finish(dir)
			return r.wait(ctx, j, dir, rec.Supervisor, nil)
		}, true
	}
	why := "its supervisor is gone"
	if resErr == nil {
		why = "its supervisor stopped it at the self-stop deadline"
	} else if recErr == nil {
		// The supervisor died (a reboot, a kill): its command must not run
		// on unwatched.
		rec.Command.signalGroup(syscall.SIGKILL)
	}
	os.RemoveAll(dir)
	if j.Spec.GetOnWorkerLost() != pb.LostPolicy_LOST_POLICY_FAIL {
		r.log.Warn("releasing a job whose command is not running", "job_id", j.ID, "token", j.Token, "why", why)
		return nil, false
	}
	r.log.Warn("settling a run-style job whose command is not running as lost", "job_id", j.ID, "token", j.Token, "why", why)
	return func(context.Context, *client.Job) (client.Result, error) {
		return client.Result{}, fmt.Errorf("%w: the command is not running: %s", client.ErrExecutionLost, why)
	}, true
}

// wait waits for the supervisor's result, passing a stop on: ctx's cause
// picks the signal. exited, when the supervisor is this process's child,
// closes when it has been reaped; otherwise its liveness is polled.
func (r *Runner) wait(ctx context.Context, j *client.Job, dir string, sup Process, exited <-chan struct{}) (client.Result, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	stop, killed := ctx.Done(), client.Killed(ctx)
	progress := progressOf{path: filepath.Join(dir, progressFile)}
	for {
		var res Result
		if err := readJSON(filepath.Join(dir, resultFile), &res); err == nil {
			return r.resultOf(ctx, res)
		}
		gone := false
		select {
		case <-exited:
			gone = true
		case <-tick.C:
			gone = exited == nil && !sup.Alive()
			progress.poll(j)
		case <-stop:
			sup.signal(stopSignal(context.Cause(ctx)))
			stop = nil // signalled once; now wait for the result
		case <-killed:
			// A kill after a cancel: SIGKILL now, not after the grace.
			sup.signal(sigKill)
			killed = nil
		}
		if gone {
			if err := readJSON(filepath.Join(dir, resultFile), &res); err == nil {
				return r.resultOf(ctx, res)
			}
			var rec Record
			if readJSON(filepath.Join(dir, supervisorFile), &rec) == nil {
				rec.Command.signalGroup(syscall.SIGKILL)
			}
			// Settled by kind, as after a restart: a run-style job must not
			// run again; an evaluation may.
			err := fmt.Errorf("the supervisor of job %s exited without a result", j.ID)
			if j.Spec.GetOnWorkerLost() == pb.LostPolicy_LOST_POLICY_FAIL {
				return client.Result{}, fmt.Errorf("%w: %w", client.ErrExecutionLost, err)
			}
			return client.Result{}, client.Retryable(err)
		}
	}
}

// progressOf publishes the last line of a job's $LEASEHOLD_PROGRESS_FILE
// as its progress note (client.Job.Progress) each time the file changes.
type progressOf struct {
	path string
	size int64
	mod  time.Time
}

// progressTail is how much of the file's end is read for its last line.
const progressTail = 4 << 10

func (p *progressOf) poll(j *client.Job) {
	fi, err := os.Stat(p.path)
	if err != nil || fi.Size() == p.size && fi.ModTime().Equal(p.mod) {
		return
	}
	p.size, p.mod = fi.Size(), fi.ModTime()
	f, err := os.Open(p.path)
	if err != nil {
		return
	}
	defer f.Close()
	buf := make([]byte, min(p.size, progressTail))
	n, _ := f.ReadAt(buf, p.size-int64(len(buf)))
	lines := strings.Split(strings.TrimRight(string(buf[:n]), "\r\n"), "\n")
	j.Progress(strings.TrimRight(lines[len(lines)-1], "\r"))
}

// signal signals the supervisor itself, if it is still itself.
func (p Process) signal(sig syscall.Signal) {
	if p.StartTime == 0 || p.Alive() {
		kill(p.PID, sig)
	}
}

// stopSignal is the signal that tells a supervisor how to stop: see the
// package doc.
func stopSignal(cause error) syscall.Signal {
	var rev *client.RevokedError
	switch {
	case errors.As(cause, &rev) && rev.Kill:
		return sigKill
	case errors.Is(cause, client.ErrLeaseLost):
		return sigLost
	default:
		return syscall.SIGTERM
	}
}

// resultOf turns a command's result into the report, or into the error
// that makes the runtime release the lease (a worker shutting down).
func (r *Runner) resultOf(ctx context.Context, res Result) (client.Result, error) {
	if cause := context.Cause(ctx); cause != nil {
		if errors.Is(cause, client.ErrShutdown) {
			// Nobody cancelled the job: the worker is stopping. An error
			// makes the runtime release the lease, so the job runs again
			// elsewhere without using an attempt.
			return client.Result{}, cause
		}
		outcome, why := pb.Outcome_OUTCOME_CANCELLED, cause.Error()
		var rev *client.RevokedError
		if errors.As(cause, &rev) && rev.Kill || isClosed(client.Killed(ctx)) {
			outcome, why = pb.Outcome_OUTCOME_KILLED, "job killed"
		}
		return client.Result{Outcome: outcome, Ref: res.Ref, Message: "stopped: " + why}, nil
	}
	switch {
	case res.ExitCode == 0 && res.Error == "":
		return client.Result{Outcome: pb.Outcome_OUTCOME_SUCCEEDED, Ref: res.Ref}, nil
	case res.ExitCode == ExitRetryable:
		out := client.Result{Outcome: pb.Outcome_OUTCOME_FAILED, Retryable: true, Ref: res.Ref, Message: message(res)}
		if res.RetryAfter != "" {
			d, err := time.ParseDuration(res.RetryAfter)
			if err != nil || d <= 0 || d > rules.MaxRetryDelay {
				r.log.Warn("retry_after_ignored", "value", res.RetryAfter, "want", "a duration of at most 168h")
			} else {
				out.RetryAfter = d
			}
		}
		return out, nil
	default:
		return client.Result{Outcome: pb.Outcome_OUTCOME_FAILED, Ref: res.Ref, Message: message(res)}, nil
	}
}

// message is the exit status and the stderr tail, cleaned of control
// characters (the API refuses them in a report's message).
func message(res Result) string {
	status := res.Error
	if status == "" {
		status = "exit status " + strconv.Itoa(res.ExitCode)
	}
	tail := strings.Map(func(r rune) rune {
		if r < ' ' && r != '\n' && r != '\t' || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(strings.TrimSpace(res.Tail), ""))
	if tail == "" {
		return status
	}
	return status + ": " + tail
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
