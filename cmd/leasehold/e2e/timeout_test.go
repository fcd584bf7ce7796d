package e2e

import (
	"strings"
	"testing"
)

// TestTimeoutKillsAndRetries: a job submitted with --timeout 2s whose
// command sleeps is killed by its worker when the leader revokes the lease
// past 2 s; the attempt ends timed_out and counts, and the job is queued
// again; with --max-attempts 1 it ends out of attempts. `job get` shows the
// timeout and the timed-out lease.
func TestTimeoutKillsAndRetries(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)

	var sub jobJSON
	decodeJSON(t, "job submit --timeout", c.cli(t, "job", "submit", "-o", "json", "--id", "slow", "--queue", "qt",
		"--timeout", "2s", "--max-attempts", "2", "--retry-initial", "1s"), &sub)
	if sub.Timeout != "2s" {
		t.Fatalf("submitted with --timeout 2s: %+v", sub)
	}
	w := c.startWorker(t, "wt", "--once", "--queue", "qt", "--kill-after", "500ms", "--drain", "2s", "--", "sleep", "60")
	if code := w.Wait(t, jobBound); code != 1 {
		t.Fatalf("worker run --once exited %d after a timeout, want 1 (killed)", code)
	}
	j := c.job(t, "slow")
	if (j.State != "queued" && j.State != "scheduled") || j.Attempts != 1 || len(j.Leases) != 1 ||
		j.Leases[0].Outcome != "timed_out" || !j.Leases[0].TimedOut || j.Leases[0].Revoke != "kill" {
		t.Fatalf("after the first attempt timed out: %+v, want queued again after 1 attempt, its lease timed_out", j)
	}
	if out := c.cli(t, "job", "get", "slow"); !strings.Contains(out, "timeout: 2s per attempt") ||
		!strings.Contains(out, "timed out: revoked with a kill") {
		t.Fatalf("job get does not show the timeout:\n%s", out)
	}

	c.cli(t, "job", "submit", "--id", "once", "--queue", "qo", "--timeout", "2s", "--max-attempts", "1")
	w = c.startWorker(t, "wo", "--once", "--queue", "qo", "--kill-after", "500ms", "--drain", "2s", "--", "sleep", "60")
	if code := w.Wait(t, jobBound); code != 1 {
		t.Fatalf("worker run --once exited %d after a timeout, want 1 (killed)", code)
	}
	j = c.job(t, "once")
	// Out of attempts: dead (a timeout needs level 6, where dead letters are).
	if j.State != "dead" || j.Attempts != 1 || j.Outcome != "timed_out" || !strings.Contains(j.Reason, "out of attempts") {
		t.Fatalf("a job of one attempt that timed out: %+v, want dead, out of attempts", j)
	}
}
