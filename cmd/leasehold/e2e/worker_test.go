package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbin"
)

// A job submitted with --payload @FILE runs under `worker run --once`: the
// command sees the job id, the token and the payload, its ref file becomes
// the report's ref, and the worker exits 0 after that one job.
func TestWorkerRunCompletesJob(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)

	payload := "first line\nsecond line with $HOME, 'quotes' and \"more\"\n"
	file := filepath.Join(t.TempDir(), "payload.txt")
	if err := os.WriteFile(file, []byte(payload), 0o600); err != nil {
		t.Fatal(err)
	}
	var submitted jobJSON
	decodeJSON(t, "job submit", c.cli(t, "job", "submit", "--id", "build-42", "--payload", "@"+file, "-o", "json"), &submitted)
	if submitted.ID != "build-42" || submitted.State != "queued" || submitted.Payload != payload {
		t.Fatalf("submitted %+v", submitted)
	}

	tmp := t.TempDir()
	w := c.startWorkerEnv(t, "w1", []string{"TMPDIR=" + tmp}, "--once", "--kill-after", "500ms", "--drain", "2s", "--",
		"sh", "-c", `echo "$LEASEHOLD_JOB_ID $LEASEHOLD_FENCING_TOKEN $LEASEHOLD_ATTEMPT"; cat; echo ref-123 > "$LEASEHOLD_REF_FILE"`)
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker run --once exited %d", code)
	}
	// The ref file lived in the worker's state directory and went with
	// the report; nothing is left in $TMPDIR.
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("$TMPDIR holds %v after the worker exited", left)
	}
	if left, err := os.ReadDir(filepath.Join(c.stateHome, "leasehold", "w1", "jobs")); err != nil || len(left) > 0 {
		t.Errorf("the state directory's jobs: %v (%v), want none", left, err)
	}

	out := c.cli(t, "job", "get", "-o", "json", "build-42")
	var fields map[string]any
	decodeJSON(t, "job get", out, &fields)
	if fields["id"] != "build-42" || fields["state"] != "reported" {
		t.Fatalf("job get: id %v, state %v, want build-42, reported", fields["id"], fields["state"])
	}
	var j jobJSON
	decodeJSON(t, "job get", out, &j)
	if j.Outcome != "succeeded" || j.Ref != "ref-123" || j.Worker != "w1" || j.Token == 0 || len(j.Leases) != 1 || j.Attempts != 1 {
		t.Fatalf("job get: %+v, want succeeded by w1 with ref ref-123, one lease, attempts 1", j)
	}
	stdout := w.Stdout()
	if want := fmt.Sprintf("build-42 %d 1\n", j.Token); !strings.HasPrefix(stdout, want) {
		t.Errorf("command's first line: %q, want %q (job id, fencing token, attempt)", stdout, want)
	}
	if !strings.Contains(stdout, payload) {
		t.Errorf("command's stdout %q lacks the payload %q (its stdin)", stdout, payload)
	}

	// main.go promises that global flags work after the command's
	// arguments too: "leasehold job get X -o json".
	t.Run("output flag after the argument", func(t *testing.T) {
		r := runCLI(t, c.env(), "job", "get", "build-42", "-o", "json")
		var after jobJSON
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &after) != nil || after.ID != "build-42" {
			t.Errorf("leasehold job get build-42 -o json: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
}

// A command's exit status decides the report: 75 (EX_TEMPFAIL) is a
// retryable failure, so the job is queued again; any other non-zero status
// fails it for good, with the command's stderr tail as the message.
func TestExitStatusMapping(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)

	// Each job in a queue of its own, so a requeued job is never picked up by
	// the next worker.
	c.cli(t, "job", "submit", "--id", "tempfail", "--queue", "q75")
	w := c.startWorker(t, "w75", "--once", "--queue", "q75", "--kill-after", "500ms", "--drain", "2s", "--",
		"sh", "-c", `echo "try again later" >&2; exit 75`)
	if code := w.Wait(t, jobBound); code != 75 {
		t.Fatalf("worker run --once exited %d after a retryable failure, want 75", code)
	}
	j := c.job(t, "tempfail")
	// Queued again after the default policy's first delay (up to 1 s):
	// scheduled until then.
	if j.State != "scheduled" && j.State != "queued" || j.NotBefore == "" || j.Attempts != 1 || len(j.Leases) != 1 ||
		j.Leases[0].State != "reported" || j.Leases[0].Outcome != "failed" {
		t.Fatalf("after exit 75: %+v, want scheduled (or queued) with attempts 1 and one reported failed lease", j)
	}
	if !strings.Contains(j.Leases[0].Message, "try again later") {
		t.Errorf("after exit 75: lease message %q lacks the stderr tail %q", j.Leases[0].Message, "try again later")
	}
	// The retry is the second execution: the command and the job agree.
	w = c.startWorker(t, "w75", "--once", "--queue", "q75", "--kill-after", "500ms", "--drain", "2s", "--",
		"sh", "-c", `echo "attempt $LEASEHOLD_ATTEMPT"`)
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker run --once exited %d after a success", code)
	}
	j = c.job(t, "tempfail")
	if j.State != "reported" || j.Outcome != "succeeded" || j.Attempts != 2 || w.Stdout() != "attempt 2\n" {
		t.Fatalf("after the retry: job %+v, command printed %q; want succeeded with attempts 2, \"attempt 2\"", j, w.Stdout())
	}

	c.cli(t, "job", "submit", "--id", "broken", "--queue", "q3")
	w = c.startWorker(t, "w3", "--once", "--queue", "q3", "--kill-after", "500ms", "--drain", "2s", "--",
		"sh", "-c", `echo "step 1 ok"; echo "boom: disk full" >&2; exit 3`)
	if code := w.Wait(t, jobBound); code != 1 {
		t.Fatalf("worker run --once exited %d after a failure, want 1", code)
	}
	j = c.job(t, "broken")
	if j.State != "reported" || j.Outcome != "failed" || j.Attempts != 1 || len(j.Leases) != 1 {
		t.Fatalf("after exit 3: %+v, want reported failed after one attempt", j)
	}
	if msg := j.Leases[0].Message + " " + j.Reason; !strings.Contains(msg, "exit status 3") || !strings.Contains(msg, "boom: disk full") {
		t.Errorf("after exit 3: lease message %q, job reason %q; want the exit status and the stderr tail %q",
			j.Leases[0].Message, j.Reason, "boom: disk full")
	}
}

var startedLine = regexp.MustCompile(`(?m)^started (\d+)$`)

// commandPID waits until the worker's command printed "started PID".
func commandPID(t *testing.T, w *proc) int {
	t.Helper()
	var pid int
	waitFor(t, jobBound, "the command to print its pid", func() error {
		m := startedLine.FindStringSubmatch(w.Stdout())
		if m == nil {
			return fmt.Errorf("stdout %q", w.Stdout())
		}
		pid, _ = strconv.Atoi(m[1])
		return nil
	})
	return pid
}

// processGone says whether pid no longer runs: it was reaped, or it is a
// zombie (an orphan waits for an init that may not reap it soon).
func processGone(pid int) bool {
	if errors.Is(signalPID(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 0 && f[0] == "Z" {
			return true
		}
	}
	return false
}

// `job cancel` reaches a running command as SIGTERM and the job is reported
// cancelled; `job kill` ends a command that survives SIGTERM with SIGKILL
// after --kill-after, and the job is reported killed.
func TestCancelAndKillReachCommand(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)

	t.Run("cancel", func(t *testing.T) {
		c.cli(t, "job", "submit", "--id", "long-1", "--queue", "qc")
		w := c.startWorker(t, "wc", "--once", "--queue", "qc", "--kill-after", "5s", "--drain", "2s", "--",
			"sh", "-c", `trap 'echo got-term; exit 0' TERM; echo started $$; sleep 60; exit 9`)
		pid := commandPID(t, w)
		c.waitJob(t, "long-1", "running")

		c.cli(t, "job", "cancel", "long-1")
		waitFor(t, jobBound, "the command to get SIGTERM", func() error {
			if !strings.Contains(w.Stdout(), "got-term") {
				return fmt.Errorf("stdout %q", w.Stdout())
			}
			return nil
		})
		if code := w.Wait(t, exitBound); code != 1 {
			t.Fatalf("worker run --once exited %d after its job was cancelled, want 1", code)
		}
		j := c.waitJob(t, "long-1", "reported")
		if j.Outcome != "cancelled" || len(j.Leases) != 1 || j.Leases[0].Revoke != "cancel" {
			t.Fatalf("cancelled job: %+v, want outcome cancelled on a lease revoked with cancel", j)
		}
		if !processGone(pid) {
			t.Errorf("command pid %d still exists", pid)
		}
	})

	t.Run("kill", func(t *testing.T) {
		c.cli(t, "job", "submit", "--id", "stubborn-1", "--queue", "qk")
		// The trap survives SIGTERM (and says so); only SIGKILL ends the
		// loop before its minute is up. --kill-after is longer than the
		// test waits: a kill must not wait for it.
		w := c.startWorker(t, "wk", "--once", "--queue", "qk", "--kill-after", "60s", "--drain", "2s", "--",
			"sh", "-c", `trap 'echo term-ignored' TERM; echo started $$; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 5; done; exit 9`)
		pid := commandPID(t, w)
		c.waitJob(t, "stubborn-1", "running")

		killed := time.Now()
		c.cli(t, "job", "kill", "stubborn-1")
		// Within one heartbeat (renew is 0.2s) plus the CLI's and the
		// report's round trips; nothing near --kill-after.
		waitFor(t, 5*time.Second, "the command to be killed", func() error {
			if !processGone(pid) {
				return fmt.Errorf("pid %d still exists", pid)
			}
			return nil
		})
		t.Logf("command gone %v after job kill was sent", time.Since(killed).Round(time.Millisecond))
		if code := w.Wait(t, exitBound); code != 1 {
			t.Fatalf("worker run --once exited %d after its job was killed, want 1", code)
		}
		if strings.Contains(w.Stdout(), "term-ignored") {
			t.Errorf("the command got SIGTERM; a kill is SIGKILL alone. stdout %q", w.Stdout())
		}
		j := c.waitJob(t, "stubborn-1", "reported")
		if j.Outcome != "killed" || len(j.Leases) != 1 || j.Leases[0].Revoke != "kill" {
			t.Fatalf("killed job: %+v, want outcome killed on a lease revoked with kill", j)
		}
	})
}

// A kill after a cancel does not wait out the cancel's --kill-after: the
// command that ignored SIGTERM gets SIGKILL at the kill.
func TestKillAfterCancel(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	c.cli(t, "job", "submit", "--id", "stubborn-2", "--queue", "qck")
	w := c.startWorker(t, "wck", "--once", "--queue", "qck", "--kill-after", "60s", "--drain", "2s", "--",
		"sh", "-c", `trap 'echo term-ignored' TERM; echo started $$; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 5; done; exit 9`)
	pid := commandPID(t, w)
	c.waitJob(t, "stubborn-2", "running")

	c.cli(t, "job", "cancel", "stubborn-2")
	waitFor(t, jobBound, "the command to get SIGTERM", func() error {
		if !strings.Contains(w.Stdout(), "term-ignored") {
			return fmt.Errorf("stdout %q", w.Stdout())
		}
		return nil
	})
	if processGone(pid) {
		t.Fatal("the command ended on a SIGTERM it ignores")
	}
	c.cli(t, "job", "kill", "stubborn-2")
	waitFor(t, 5*time.Second, "the command to be killed", func() error {
		if !processGone(pid) {
			return fmt.Errorf("pid %d still exists", pid)
		}
		return nil
	})
	if code := w.Wait(t, exitBound); code != 1 {
		t.Fatalf("worker run --once exited %d, want 1", code)
	}
	j := c.waitJob(t, "stubborn-2", "reported")
	if j.Outcome != "killed" || len(j.Leases) != 1 || j.Leases[0].Revoke != "kill" {
		t.Fatalf("job %+v, want outcome killed on a lease revoked with kill", j)
	}
}

// With API authentication on, a job's command checks its own fencing token
// with the CLI: LEASEHOLD_FENCING_TOKEN is the lease's token, and
// LEASEHOLD_TOKEN stays the bearer token the worker was given.
func TestCommandChecksItsFence(t *testing.T) {
	t.Parallel()
	const admin, worker = "admin-secret-0123456789", "worker-secret-0123456789"
	c := startClusterWith(t, 1, fmt.Sprintf(`
[[auth.tokens]]
name = "ops"
token = %q
role = "admin"

[[auth.tokens]]
name = "workers"
token = %q
role = "worker"
workers = ["fw-*"]
`, admin, worker), admin)

	c.cli(t, "job", "submit", "--id", "fenced-1", "--queue", "qf")
	w := c.startWorkerEnv(t, "fw-1", []string{"LEASEHOLD_TOKEN=" + worker}, "--once", "--queue", "qf", "--kill-after", "500ms", "--drain", "2s", "--",
		"sh", "-c", testbin.Leasehold(t)+` lease check "$LEASEHOLD_JOB_ID" "$LEASEHOLD_FENCING_TOKEN" && echo fence-ok`)
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker run --once exited %d; stderr %s", code, tail(w.Stderr()))
	}
	j := c.job(t, "fenced-1")
	want := fmt.Sprintf("current=true current_token=%d state=running\nfence-ok\n", j.Token)
	if got := w.Stdout(); got != want || j.Outcome != "succeeded" {
		t.Fatalf("command's stdout %q, job %+v; want %q and succeeded", got, j, want)
	}
}

// parseTime reads a time the CLI printed (RFC 3339 with nanoseconds).
func parseTime(t *testing.T, what, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s: %q: %v", what, s, err)
	}
	return v
}

// A job submitted with --in is scheduled, listed apart from the queued
// ones, and granted no earlier than its time; a command that exits 75 after
// writing a duration to $LEASEHOLD_RETRY_AFTER_FILE waits exactly that long
// (a snooze, no jitter) before its next attempt.
func TestScheduledJobAndSnooze(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)

	var sub jobJSON
	decodeJSON(t, "job submit --in", c.cli(t, "job", "submit", "-o", "json", "--id", "later", "--queue", "qs", "--in", "2s"), &sub)
	if sub.State != "scheduled" || sub.NotBefore == "" {
		t.Fatalf("submitted with --in 2s: %+v, want scheduled with a not-before time", sub)
	}
	if out := c.cli(t, "job", "list", "--queue", "qs", "--state", "scheduled"); !strings.Contains(out, "later") {
		t.Fatalf("job list --state scheduled:\n%s", out)
	}
	if out := c.cli(t, "job", "list", "--queue", "qs", "--state", "queued"); strings.Contains(out, "later") {
		t.Fatalf("job list --state queued shows a scheduled job:\n%s", out)
	}
	w := c.startWorker(t, "ws", "--once", "--queue", "qs", "--kill-after", "500ms", "--drain", "2s", "--", "true")
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker run --once exited %d", code)
	}
	j := c.job(t, "later")
	notBefore := parseTime(t, "not_before", sub.NotBefore)
	if j.State != "reported" || len(j.Leases) != 1 || parseTime(t, "granted_at", j.Leases[0].GrantedAt).Before(notBefore) {
		t.Fatalf("job %+v: want reported, granted no earlier than %s", j, sub.NotBefore)
	}

	c.cli(t, "job", "submit", "--id", "snoozer", "--queue", "qz")
	script := `if [ "$LEASEHOLD_ATTEMPT" = 1 ]; then echo 3s > "$LEASEHOLD_RETRY_AFTER_FILE"; exit 75; fi; echo "attempt $LEASEHOLD_ATTEMPT"`
	w = c.startWorker(t, "wz", "--once", "--queue", "qz", "--kill-after", "500ms", "--drain", "2s", "--", "sh", "-c", script)
	if code := w.Wait(t, jobBound); code != 75 {
		t.Fatalf("worker run --once exited %d after a snooze, want 75", code)
	}
	j = c.job(t, "snoozer")
	if len(j.Leases) != 1 || j.NotBefore == "" {
		t.Fatalf("after the snooze: %+v", j)
	}
	if d := parseTime(t, "not_before", j.NotBefore).Sub(parseTime(t, "ended_at", j.Leases[0].EndedAt)); d != 3*time.Second {
		t.Fatalf("snoozed for %s after the report, want 3s", d)
	}
	w = c.startWorker(t, "wz", "--once", "--queue", "qz", "--kill-after", "500ms", "--drain", "2s", "--", "sh", "-c", script)
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker run --once exited %d on the second attempt", code)
	}
	j = c.job(t, "snoozer")
	if j.State != "reported" || j.Attempts != 2 || w.Stdout() != "attempt 2\n" ||
		parseTime(t, "granted_at", j.Leases[1].GrantedAt).Before(parseTime(t, "not_before", j.NotBefore)) {
		t.Fatalf("after the second attempt: %+v, command printed %q", j, w.Stdout())
	}
}

// A shell command publishes progress through $LEASEHOLD_PROGRESS_FILE: the
// file's last line travels with the worker's heartbeats and `job get`
// shows it while the job runs (as JSON, and as a line of the table); the
// finished job shows none.
func TestProgressNoteFromAShellCommand(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	done := filepath.Join(t.TempDir(), "done")
	c.cli(t, "job", "submit", "--id", "busy", "--queue", "qp", "--payload", done)
	script := `echo "step 1 of 2" > "$LEASEHOLD_PROGRESS_FILE"; echo "step 2 of 2" >> "$LEASEHOLD_PROGRESS_FILE"; ` +
		`while [ ! -e "$LEASEHOLD_PAYLOAD" ]; do sleep 0.05; done`
	w := c.startWorker(t, "wp", "--once", "--queue", "qp", "--kill-after", "500ms", "--drain", "2s", "--", "sh", "-c", script)
	var j jobJSON
	waitFor(t, jobBound, "job get to show the progress note", func() error {
		if j = c.job(t, "busy"); j.Progress != "step 2 of 2" {
			return fmt.Errorf("state %s, progress %q", j.State, j.Progress)
		}
		return nil
	})
	if j.State != "running" || j.ProgressAt == "" {
		t.Fatalf("job %+v: want running, with the time its note was heard", j)
	}
	parseTime(t, "progress_at", j.ProgressAt)
	if out := c.cli(t, "job", "get", "busy"); !regexp.MustCompile(`(?m)^progress: step 2 of 2 \(heard \d+s ago\)$`).MatchString(out) {
		t.Fatalf("job get:\n%s\nwant a progress line", out)
	}
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker run --once exited %d", code)
	}
	if j = c.job(t, "busy"); j.State != "reported" || j.Progress != "" {
		t.Fatalf("finished job %+v: want reported, without a note", j)
	}
}
