package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// Dead letters through the CLI: a job whose command fails retryably until
// it is out of attempts ends dead with its last error, `job list --state
// dead` shows it, `job retry` queues it again with a fresh budget and the
// next attempt succeeds under a larger token; `job purge` removes another
// dead job and skips one that is not dead.
func TestDeadLetterRetryAndPurge(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	// The rule switches on the levels the leader records (at takeover, once
	// every voter answers): wait for them.
	waitFor(t, readyBound, "every member's level recorded", func() error {
		var members []struct {
			ID    string `json:"id"`
			Level uint32 `json:"level"`
		}
		if err := json.Unmarshal([]byte(c.cli(t, "cluster", "members", "-o", "json")), &members); err != nil {
			return err
		}
		for _, m := range members {
			if m.Level < 6 {
				return fmt.Errorf("%s at level %d", m.ID, m.Level)
			}
		}
		return nil
	})

	c.cli(t, "job", "submit", "--id", "doomed", "--queue", "qd", "--max-attempts", "2", "--retry-initial", "0s")
	c.cli(t, "job", "submit", "--id", "trash", "--queue", "qt", "--max-attempts", "1")
	fail := `echo "attempt $LEASEHOLD_ATTEMPT failed" >&2; exit 75`
	for _, q := range []string{"qd", "qd", "qt"} {
		w := c.startWorker(t, "wd", "--once", "--queue", q, "--kill-after", "500ms", "--drain", "2s", "--", "sh", "-c", fail)
		if code := w.Wait(t, jobBound); code != 75 {
			t.Fatalf("worker run --once on %s exited %d, want 75", q, code)
		}
	}
	dead := c.job(t, "doomed")
	if dead.State != "dead" || dead.Attempts != 2 || !strings.HasPrefix(dead.Reason, "out of attempts (2 of 2): exit status 75") || len(dead.Leases) != 2 {
		t.Fatalf("after two retryable failures of two: %+v, want dead, out of attempts", dead)
	}
	var listed []jobJSON
	decodeJSON(t, "job list --state dead", c.cli(t, "job", "list", "--state", "dead", "-o", "json"), &listed)
	if len(listed) != 2 || listed[0].ID != "doomed" || listed[1].ID != "trash" {
		t.Fatalf("job list --state dead: %+v, want doomed and trash", listed)
	}

	var retried jobJSON
	decodeJSON(t, "job retry", c.cli(t, "job", "retry", "doomed", "--reason", "fixed", "-o", "json"), &retried)
	if retried.State != "queued" || retried.Attempts != 0 || retried.Reason != "" {
		t.Fatalf("job retry: %+v, want queued with a fresh budget", retried)
	}
	if r := runCLI(t, c.env(), "job", "retry", "doomed"); r.code == 0 || !strings.Contains(r.stderr, "JOB_NOT_DEAD") {
		t.Fatalf("job retry of a queued job: exit %d, stderr %q, want JOB_NOT_DEAD", r.code, r.stderr)
	}
	w := c.startWorker(t, "wd", "--once", "--queue", "qd", "--kill-after", "500ms", "--drain", "2s", "--", "true")
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker run --once after the retry exited %d", code)
	}
	done := c.job(t, "doomed")
	if done.State != "reported" || done.Outcome != "succeeded" || done.Attempts != 1 || len(done.Leases) != 3 || done.Token <= dead.Token {
		t.Fatalf("after the retry: %+v, want succeeded at attempt 1 with a token above %d", done, dead.Token)
	}

	var purged struct {
		Purged  []string `json:"purged"`
		Skipped []string `json:"skipped"`
	}
	decodeJSON(t, "job purge --id", c.cli(t, "job", "purge", "--id", "doomed", "-o", "json"), &purged)
	if len(purged.Purged) != 0 || len(purged.Skipped) != 1 || purged.Skipped[0] != "doomed" {
		t.Fatalf("job purge --id of a job not dead: %+v, want it skipped", purged)
	}
	decodeJSON(t, "job purge --queue", c.cli(t, "job", "purge", "--queue", "qt", "--older-than", "0s", "-o", "json"), &purged)
	if len(purged.Purged) != 1 || purged.Purged[0] != "trash" {
		t.Fatalf("job purge --queue qt: %+v, want trash", purged)
	}
	if r := runCLI(t, c.env(), "job", "get", "trash"); r.code == 0 || !strings.Contains(r.stderr, "NOT_FOUND") {
		t.Fatalf("job get of a purged job: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, c.env(), "job", "purge"); r.code == 0 {
		t.Fatal("job purge naming nothing succeeded")
	}
}
