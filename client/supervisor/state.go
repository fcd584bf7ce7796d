package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/clock"
)

// Names of the files in a state directory (see the package doc).
const (
	deadlineFile   = "deadline"
	jobsDir        = "jobs"
	payloadFile    = "payload"
	refFile        = "ref"
	retryAfterFile = "retry-after"
	progressFile   = "progress"
	supervisorFile = "supervisor"
	resultFile     = "result"
)

// Process names one process for its whole life: its pid and its start time
// in clock ticks since boot (field 22 of /proc/PID/stat), which a reused pid
// does not share.
type Process struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// processOf reads pid's start time; an error when there is no such process.
func processOf(pid int) (Process, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Process{}, err
	}
	st, state, err := parseStat(string(b))
	if err != nil {
		return Process{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	if state == "Z" || state == "X" {
		return Process{}, fmt.Errorf("process %d has exited", pid)
	}
	return Process{PID: pid, StartTime: st}, nil
}

// parseStat returns the start time and state of a /proc/PID/stat line. The
// command name (field 2) may hold spaces and parentheses: fields are
// counted from the last ')'.
func parseStat(s string) (start uint64, state string, err error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", errors.New("no ')' in stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 {
		return 0, "", errors.New("short stat")
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0], err
}

// Alive says whether p is still the process it named: running (not a
// zombie) with the same start time.
func (p Process) Alive() bool {
	if p.PID <= 0 {
		return false
	}
	now, err := processOf(p.PID)
	return err == nil && now.StartTime == p.StartTime
}

// signalGroup signals p's process group (p leads it), if p is still p.
func (p Process) signalGroup(sig syscall.Signal) {
	if p.Alive() {
		kill(-p.PID, sig)
	}
}

// Record is what a supervisor writes about itself and its command.
type Record struct {
	Supervisor Process `json:"supervisor"`
	Command    Process `json:"command"` // zero until the command started
}

// Result is how a command ended, written by its supervisor.
type Result struct {
	// ExitCode is the command's exit status; -1 when a signal ended it
	// or it never started.
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// Error says why the command did not start, or how waiting for it
	// failed.
	Error string `json:"error,omitempty"`
	// Stopped says who stopped the command, if anyone did: "deadline"
	// (the self-stop deadline passed), "cancel", "kill", "lost".
	Stopped string `json:"stopped,omitempty"`
	Tail    string `json:"tail,omitempty"` // the last 2 KiB of stderr
	Ref     string `json:"ref,omitempty"`
	// RetryAfter is what the command wrote to its retry-after file: with
	// exit status 75, the delay it asks for before the next attempt.
	RetryAfter string `json:"retry_after,omitempty"`
	// Ended is the wall time the command ended.
	Ended time.Time `json:"ended"`
}

// writeFileAtomic writes b to path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b)
}

// readJSON reads path into v; os.ErrNotExist when there is no such file.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Boottime reads clock.System, the worker's clock the deadlines are written
// on: CLOCK_BOOTTIME on Linux, which keeps counting while the machine is
// suspended.
func Boottime() time.Duration { return time.Duration(clock.System().Now().UnixNano()) }

// readDeadline reads a deadline file; false when there is none to read.
func readDeadline(path string) (time.Duration, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(ns), true
}
