package supervisor

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// pollEvery is how often a supervisor reads the deadline file, and a
// worker looks for a result it did not see arrive. A sleep runs on the
// monotonic clock, which stops while the machine is suspended: one
// interval after waking up, the supervisor compares the deadline with the
// suspend-aware clock again.
const pollEvery = 50 * time.Millisecond

// SuperviseOptions are a supervisor's: the job's directory, the worker's
// deadline file, the grace between SIGTERM and SIGKILL, and the command.
type SuperviseOptions struct {
	JobDir       string
	DeadlineFile string
	KillAfter    time.Duration
	Argv         []string
}

// Supervise is the supervisor process's main: it starts the command in a
// process group of its own, with the job's payload on stdin and its own
// stdout and stderr, records both processes, stops the command when the
// worker asks (signals) or when the self-stop deadline passes, and writes
// the command's result. The supervisor runs in a session of its own (the
// worker starts it with setsid), so neither the worker's death nor the
// terminal's hangup reaches it. It returns the process's exit status.
func Supervise(o SuperviseOptions) int {
	if !supported() {
		return finish(o, Result{ExitCode: -1, Error: errUnsupported.Error()})
	}
	sigs := make(chan os.Signal, 4)
	// SIGPIPE is handled so that writing to a stdout nobody reads any more
	// (the worker that started us is gone) is an error, not our death. A
	// handled signal is reset to its default in the command.
	signal.Notify(sigs, syscall.SIGTERM, sigKill, sigLost, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	defer signal.Stop(sigs)

	self, err := processOf(os.Getpid())
	if err != nil {
		return finish(o, Result{ExitCode: -1, Error: err.Error()})
	}
	rec := Record{Supervisor: self}
	if err := writeJSON(filepath.Join(o.JobDir, supervisorFile), rec); err != nil {
		return finish(o, Result{ExitCode: -1, Error: err.Error()})
	}

	stdin, err := os.Open(filepath.Join(o.JobDir, payloadFile))
	if err != nil {
		return finish(o, Result{ExitCode: -1, Error: err.Error()})
	}
	defer stdin.Close()
	cmd := exec.Command(o.Argv[0], o.Argv[1:]...)
	cmd.Stdin = stdin
	cmd.Stdout = ignoreErrors{os.Stdout}
	var tail tailBuffer
	cmd.Stderr = &teeTail{w: ignoreErrors{os.Stderr}, tail: &tail}
	// Its own process group, so a stop reaches whatever the command started.
	cmd.SysProcAttr = groupAttr()
	// A process that leaves the group but keeps the output open must not
	// keep the job "running" forever.
	cmd.WaitDelay = o.KillAfter
	if err := cmd.Start(); err != nil {
		return finish(o, Result{ExitCode: -1, Error: err.Error()})
	}
	// The command's start time is read right after the fork: before it
	// exits (it cannot be reaped before Wait), so its pid is still its own.
	rec.Command, _ = processOf(cmd.Process.Pid)
	if rec.Command.PID == 0 {
		rec.Command = Process{PID: cmd.Process.Pid}
	}
	_ = writeJSON(filepath.Join(o.JobDir, supervisorFile), rec)

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	group := cmd.Process.Pid
	stopped := ""
	var killAt <-chan time.Time // set after a SIGTERM: SIGKILL then
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			res := resultOf(err, &tail)
			res.Stopped = stopped
			res.Ref = readRef(filepath.Join(o.JobDir, refFile))
			res.RetryAfter = readRef(filepath.Join(o.JobDir, retryAfterFile))
			return finish(o, res)
		case sig := <-sigs:
			switch sig {
			case syscall.SIGTERM: // cancel, or the worker shutting down
				if stopped == "" {
					stopped = "cancel"
					kill(-group, syscall.SIGTERM)
					killAt = time.After(o.KillAfter)
				}
			case sigKill: // kill: nothing graceful
				stopped = "kill"
				kill(-group, syscall.SIGKILL)
			case sigLost: // lost: the lease is ending now
				stopped = "lost"
				stopNow(group)
			}
			// SIGINT, SIGHUP and SIGPIPE are not the worker's: ignored.
		case <-tick.C:
			if d, ok := readDeadline(o.DeadlineFile); ok && Boottime() >= d && stopped != "deadline" {
				stopped = "deadline"
				stopNow(group)
			}
		case <-killAt:
			kill(-group, syscall.SIGKILL)
		}
	}
}

// stopNow stops a process group as the worker stops a job whose lease is
// ending: SIGTERM, then SIGKILL without waiting.
func stopNow(group int) {
	kill(-group, syscall.SIGTERM)
	kill(-group, syscall.SIGKILL)
}

// finish writes the result and returns the supervisor's exit status.
func finish(o SuperviseOptions, res Result) int {
	res.Ended = time.Now()
	if err := writeJSON(filepath.Join(o.JobDir, resultFile), res); err != nil {
		os.Stderr.WriteString("leasehold supervise: writing the result: " + err.Error() + "\n")
		return 1
	}
	return 0
}

func resultOf(err error, tail *tailBuffer) Result {
	res := Result{Tail: tail.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.ExitCode = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = ws.Signal().String()
		}
		if res.ExitCode < 0 || res.Signal != "" {
			res.Error = exit.Error()
		}
	default:
		// exec.ErrWaitDelay: the command exited but something it started
		// kept its output open past the grace.
		res.ExitCode = -1
		res.Error = err.Error()
		if cmdErr := errors.Unwrap(err); cmdErr != nil {
			res.Error = cmdErr.Error()
		}
	}
	return res
}

// readRef returns the first line of the ref file (or the retry-after
// file), bounded.
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

// ignoreErrors writes to w as long as it works: a worker that died closed
// the other end of our stdout, and the command must not fail for that.
type ignoreErrors struct{ w io.Writer }

func (i ignoreErrors) Write(p []byte) (int, error) {
	i.w.Write(p)
	return len(p), nil
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

func (t *tailBuffer) String() string { return string(t.b) }

type teeTail struct {
	w    io.Writer
	tail *tailBuffer
}

func (t *teeTail) Write(p []byte) (int, error) {
	t.tail.Write(p)
	return t.w.Write(p)
}
