package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// supervisorRecord is a job's jobs/TOKEN/supervisor file in a worker's
// state directory (client/supervisor.Record).
type supervisorRecord struct {
	Supervisor struct {
		PID int `json:"pid"`
	} `json:"supervisor"`
	Command struct {
		PID int `json:"pid"`
	} `json:"command"`
}

func (c *cluster) jobsDir(worker string) string {
	return filepath.Join(c.stateHome, "leasehold", worker, "jobs")
}

// supervisorOf waits for the supervisor record of the worker's job with
// token, naming its command.
func (c *cluster) supervisorOf(t *testing.T, worker string, token uint64) supervisorRecord {
	t.Helper()
	var rec supervisorRecord
	path := filepath.Join(c.jobsDir(worker), fmt.Sprint(token), "supervisor")
	waitFor(t, jobBound, "the supervisor's record", func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return err
		}
		if rec.Supervisor.PID == 0 || rec.Command.PID == 0 {
			return fmt.Errorf("record %s", b)
		}
		return nil
	})
	// Whatever the test leaves behind dies with it.
	t.Cleanup(func() {
		signalPID(-rec.Command.PID, syscall.SIGKILL)
		signalPID(rec.Supervisor.PID, syscall.SIGKILL)
	})
	return rec
}

// runningJob submits a job, starts a worker that runs a command for it,
// and returns the worker, the job as running, and the supervisor's record.
// The command appends a line to dir/runs per execution and ends once
// dir/go exists (see release); the test decides when.
func runningJob(t *testing.T, c *cluster, worker, job, kind, dir string) (*proc, jobJSON, supervisorRecord) {
	t.Helper()
	c.cli(t, "job", "submit", "--id", job, "--kind", kind, "--queue", "q-"+job)
	w := c.startWorker(t, worker, "--queue", "q-"+job, "--kill-after", "500ms", "--drain", "2s", "--",
		"sh", "-c", fmt.Sprintf(`echo started $$; echo run >> %q; while [ ! -e %q ]; do sleep 0.05; done; echo ref-%s > "$LEASEHOLD_REF_FILE"`,
			filepath.Join(dir, "runs"), filepath.Join(dir, "go"), job))
	pid := commandPID(t, w)
	j := c.waitJob(t, job, "running")
	rec := c.supervisorOf(t, worker, j.Token)
	if rec.Command.PID != pid {
		t.Fatalf("the supervisor records command pid %d; the command says %d", rec.Command.PID, pid)
	}
	return w, j, rec
}

// release lets runningJob's command end.
func release(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// crash SIGKILLs a worker and returns once it is dead, without waiting for
// its output pipes: the supervisors it started hold them open.
func crash(t *testing.T, w *proc) {
	t.Helper()
	pid := w.Pid()
	if err := w.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, exitBound, "the worker to die", func() error {
		if !processGone(pid) {
			return fmt.Errorf("pid %d still exists", pid)
		}
		return nil
	})
}

func executions(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

// A SIGKILLed `worker run` leaves its command running under its supervisor;
// restarted with the same id within the self-stop deadline, it re-attaches
// and reports the command's result under the first token: one execution.
func TestWorkerRestartReattaches(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	dir := t.TempDir()
	w, first, rec := runningJob(t, c, "rw", "reattach-1", "run", dir)

	crash(t, w)
	if processGone(rec.Command.PID) {
		t.Fatal("the command died with its worker")
	}
	w2 := c.startWorker(t, "rw", "--once", "--queue", "q-reattach-1", "--kill-after", "500ms", "--drain", "2s", "--", "false")
	waitFor(t, jobBound, "the restarted worker to re-attach", func() error {
		if !strings.Contains(w2.Stderr(), "re-attached to a running job's supervisor") {
			return fmt.Errorf("stderr %q", w2.Stderr())
		}
		return nil
	})
	if processGone(rec.Command.PID) {
		t.Fatal("the command ended before it was told to")
	}
	release(t, dir)
	if code := w2.Wait(t, jobBound); code != 0 {
		t.Fatalf("restarted worker exited %d; stderr %s", code, tail(w2.Stderr()))
	}
	j := c.waitJob(t, "reattach-1", "reported")
	if j.Outcome != "succeeded" || j.Token != first.Token || len(j.Leases) != 1 || j.Ref != "ref-reattach-1" || j.Attempts != 1 {
		t.Fatalf("job %+v; want succeeded under the first token %d with one lease, ref ref-reattach-1, attempts 1", j, first.Token)
	}
	if n := executions(t, dir); n != 1 {
		t.Fatalf("the command ran %d times, want once", n)
	}
	if left, _ := os.ReadDir(c.jobsDir("rw")); len(left) > 0 {
		t.Errorf("the state directory keeps %v after the report", left)
	}
}

// The command ends while its worker is down: the supervisor keeps the
// result, and the restarted worker reports it under the first token.
func TestWorkerRestartReportsResultKeptWhileDown(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	dir := t.TempDir()
	w, first, _ := runningJob(t, c, "kw", "kept-1", "run", dir)
	crash(t, w)
	release(t, dir)
	result := filepath.Join(c.jobsDir("kw"), fmt.Sprint(first.Token), "result")
	waitFor(t, jobBound, "the supervisor's result", func() error {
		_, err := os.Stat(result)
		return err
	})
	w2 := c.startWorker(t, "kw", "--once", "--queue", "q-kept-1", "--", "false")
	if code := w2.Wait(t, jobBound); code != 0 {
		t.Fatalf("restarted worker exited %d; stderr %s", code, tail(w2.Stderr()))
	}
	j := c.waitJob(t, "kept-1", "reported")
	if j.Outcome != "succeeded" || j.Token != first.Token || len(j.Leases) != 1 || j.Ref != "ref-kept-1" {
		t.Fatalf("job %+v; want succeeded under the first token %d with ref ref-kept-1", j, first.Token)
	}
	if n := executions(t, dir); n != 1 {
		t.Fatalf("the command ran %d times, want once", n)
	}
}

// A worker that stays down past its self-stop deadline: the supervisor
// stops the command before the cluster can expire the lease, and the job
// is then settled by its kind (a run-style job is lost, an evaluation
// queued again; neither is an attempt). A restart finds nothing to
// re-attach to and cleans the job's files away.
func TestSupervisorStopsCommandAtDeadline(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	for _, tc := range []struct{ kind, state string }{{"run", "lost"}, {"evaluation", "queued"}} {
		t.Run(tc.kind, func(t *testing.T) {
			dir, worker, job := t.TempDir(), "dw-"+tc.kind, "deadline-"+tc.kind
			w, first, rec := runningJob(t, c, worker, job, tc.kind, dir)

			killed := time.Now()
			crash(t, w)
			var j jobJSON
			waitFor(t, jobBound, "the lease to expire", func() error {
				if j = c.job(t, job); len(j.Leases) != 1 || j.Leases[0].State != "expired" {
					return fmt.Errorf("job %+v", j)
				}
				return nil
			})
			if j.State != tc.state || j.Attempts != 0 || tc.kind == "run" && j.Reason != "worker lost" {
				t.Fatalf("job %+v; want %s, attempts 0", j, tc.state)
			}
			if !processGone(rec.Command.PID) {
				t.Fatal("the command still runs after its lease expired")
			}
			// When the command ended, by the supervisor's account, and when
			// the lease ended, stamped by the leader: both wall times of
			// this machine.
			var res struct {
				Stopped string    `json:"stopped"`
				Ended   time.Time `json:"ended"`
			}
			b, err := os.ReadFile(filepath.Join(c.jobsDir(worker), fmt.Sprint(first.Token), "result"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
			expired, err := time.Parse(time.RFC3339Nano, j.Leases[0].EndedAt)
			if err != nil {
				t.Fatalf("lease ended_at %q: %v", j.Leases[0].EndedAt, err)
			}
			t.Logf("after the worker's kill: command stopped at %v, lease expired at %v (slack %v)",
				res.Ended.Sub(killed).Round(time.Millisecond), expired.Sub(killed).Round(time.Millisecond), expired.Sub(res.Ended).Round(time.Millisecond))
			if res.Stopped != "deadline" || !res.Ended.Before(expired) {
				t.Fatalf("the supervisor's result %s: want stopped at the deadline, before the lease expired at %v", b, expired)
			}

			// Another queue: the restart must not take the job again.
			c.startWorker(t, worker, "--queue", "elsewhere", "--", "false")
			waitFor(t, jobBound, "the restarted worker to clean its state directory", func() error {
				if left, _ := os.ReadDir(c.jobsDir(worker)); len(left) > 0 {
					return fmt.Errorf("jobs %v", left)
				}
				return nil
			})
			if n := executions(t, dir); n != 1 {
				t.Fatalf("the command ran %d times, want once", n)
			}
		})
	}
}

// The supervisor is gone too (the machine rebooted, or someone killed it):
// a restarted worker settles the job by its kind. An evaluation is released
// to the queue, no attempt used; a run-style job must not run twice: its
// lease is released as lost, so it ends lost, "worker lost", no attempt
// counted, as an expiry would end it. A command left running without its
// supervisor is killed.
func TestSupervisorGoneSettlesByKind(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)

	t.Run("evaluation", func(t *testing.T) {
		dir := t.TempDir()
		w, first, rec := runningJob(t, c, "gw-eval", "gone-eval", "evaluation", dir)
		crash(t, w)
		// The reboot: the supervisor dies first, so it never sees its
		// command end and writes no result.
		signalPID(rec.Supervisor.PID, syscall.SIGKILL)
		waitFor(t, exitBound, "the supervisor to die", func() error {
			if !processGone(rec.Supervisor.PID) {
				return fmt.Errorf("pid %d still exists", rec.Supervisor.PID)
			}
			return nil
		})
		signalPID(-rec.Command.PID, syscall.SIGKILL)
		// Another queue: the restart must not take the job again.
		c.startWorker(t, "gw-eval", "--queue", "elsewhere", "--", "false")
		j := c.waitJob(t, "gone-eval", "queued")
		if len(j.Leases) != 1 || j.Leases[0].Token != first.Token || j.Leases[0].State != "released" || j.Attempts != 0 {
			t.Fatalf("job %+v; want queued again, its lease %d released, attempts 0", j, first.Token)
		}
	})

	t.Run("run", func(t *testing.T) {
		dir := t.TempDir()
		w, first, rec := runningJob(t, c, "gw-run", "gone-run", "run", dir)
		crash(t, w)
		signalPID(rec.Supervisor.PID, syscall.SIGKILL) // the command runs on, unwatched
		waitFor(t, exitBound, "the supervisor to die", func() error {
			if !processGone(rec.Supervisor.PID) {
				return fmt.Errorf("pid %d still exists", rec.Supervisor.PID)
			}
			return nil
		})
		w2 := c.startWorker(t, "gw-run", "--once", "--queue", "elsewhere", "--", "false")
		if code := w2.Wait(t, jobBound); code != 1 {
			t.Fatalf("restarted worker exited %d, want 1 (its job did not succeed)", code)
		}
		j := c.waitJob(t, "gone-run", "lost")
		if j.Reason != "worker lost" || j.Attempts != 0 || len(j.Leases) != 1 || j.Leases[0].Token != first.Token || j.Leases[0].State != "expired" {
			t.Fatalf("job %+v; want lost (worker lost), no attempt, its lease %d ended as a lost worker's", j, first.Token)
		}
		waitFor(t, exitBound, "the unwatched command to be killed", func() error {
			if !processGone(rec.Command.PID) {
				return fmt.Errorf("pid %d still exists", rec.Command.PID)
			}
			return nil
		})
		if n := executions(t, dir); n != 1 {
			t.Fatalf("the command ran %d times, want once", n)
		}
	})
}
