package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// workerJSON is `worker get -o json`, the fields the tests read.
type workerJSON struct {
	ID         string `json:"id"`
	State      string `json:"state"`
	LastHeard  string `json:"last_heard"`
	SilenceMS  *int64 `json:"silence_ms"`
	LeaseCount uint32 `json:"lease_count"`
	Leases     []struct {
		JobID string `json:"job_id"`
		Token uint64 `json:"token,string"`
	} `json:"leases"`
	Capacity uint32 `json:"capacity"`
	Version  string `json:"version"`
}

// An operator sees a worker as the leader does: active with its lease
// while it heartbeats (a stale read on a follower: unknown), unreachable
// once it has been silent past grace. `worker deregister` refuses an
// active worker holding leases without --force, and deregisters the
// silent one: its leases are settled as a lost worker's, by kind (the
// run-style job lost, the other queued again).
func TestWorkerListGetDeregister(t *testing.T) {
	t.Parallel()
	// Toleration well past grace: the silent worker's lease stays live
	// while the test looks at it.
	c := startCluster(t, 3, "--toleration-seconds", "30")
	leader := c.waitReady(t)

	c.cli(t, "job", "submit", "--id", "seen-1", "--queue", "qs")
	c.cli(t, "job", "submit", "--id", "seen-run", "--queue", "qs", "--kind", "run")
	// The command waits for a file the test never writes, or about a
	// minute, should it outlive its worker.
	never := filepath.Join(t.TempDir(), "never")
	w := c.startWorker(t, "ws", "--queue", "qs", "--concurrency", "2", "--kill-after", "500ms", "--drain", "1s", "--",
		"sh", "-c", `n=0; while [ ! -e "$1" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done`, "sh", never)
	running := c.waitJob(t, "seen-1", "running")
	runJob := c.waitJob(t, "seen-run", "running")

	var got workerJSON
	decodeJSON(t, "worker get", c.cli(t, "worker", "get", "-o", "json", "ws"), &got)
	// The test binary is built without -ldflags: its version is "dev".
	if got.State != "active" || got.Version != "dev" || got.SilenceMS == nil || got.LastHeard == "" || got.Capacity != 2 || got.LeaseCount != 2 ||
		len(got.Leases) != 2 || got.Leases[0].JobID != "seen-1" || got.Leases[0].Token != running.Token {
		t.Fatalf("worker get ws: %+v, want active holding seen-1 under token %d and seen-run", got, running.Token)
	}
	table := c.cli(t, "worker", "list")
	if row := rowOf(table, "ws"); len(row) != 7 || row[1] != "active" || row[3] != "ago" || row[4] != "2" || row[5] != "2" || row[6] != "dev" {
		t.Fatalf("worker list table:\n%s", table)
	}

	// A stale read on a follower knows the lease, not the presence.
	var follower *node
	for _, n := range c.nodes {
		if n != leader {
			follower = n
			break
		}
	}
	waitFor(t, jobBound, "the follower's stale read shows the lease", func() error {
		var ws []workerJSON
		decodeJSON(t, "worker list --stale", mustCLI(t, append(baseEnv(), "LEASEHOLD_ENDPOINTS="+follower.apiAddr),
			"worker", "list", "--stale", "-o", "json"), &ws)
		if len(ws) != 1 || ws[0].State != "unknown" || ws[0].SilenceMS != nil || ws[0].LeaseCount != 2 {
			return fmt.Errorf("%+v", ws)
		}
		return nil
	})

	r := runCLI(t, c.env(), "worker", "deregister", "ws")
	if r.code != 1 || !strings.Contains(r.stderr, "active and holds 2 leases") {
		t.Fatalf("deregister an active worker holding a lease: exit %d, stderr %q", r.code, r.stderr)
	}

	// The worker dies: silent past grace (2 s), it is unreachable.
	w.Kill()
	waitFor(t, jobBound, "ws unreachable", func() error {
		decodeJSON(t, "worker get", c.cli(t, "worker", "get", "-o", "json", "ws"), &got)
		if got.State != "unreachable" {
			return fmt.Errorf("state %s", got.State)
		}
		return nil
	})
	if *got.SilenceMS <= 2000 || got.LeaseCount != 2 {
		t.Fatalf("unreachable: %+v, want silent past grace, still holding its lease", got)
	}

	out := strings.Join(strings.Fields(c.cli(t, "worker", "deregister", "ws")), " ")
	for _, want := range []string{fmt.Sprintf("seen-1 %d queued", running.Token), fmt.Sprintf("seen-run %d lost", runJob.Token)} {
		if !strings.Contains(out, want) {
			t.Fatalf("deregister: %q, want a line %q", out, want)
		}
	}
	if j := c.job(t, "seen-1"); j.State != "queued" || j.Attempts != 0 {
		t.Fatalf("seen-1 after deregistration: %+v, want queued, no attempt", j)
	}
	if j := c.job(t, "seen-run"); j.State != "lost" || j.Reason != "worker lost" || j.Attempts != 0 {
		t.Fatalf("seen-run after deregistration: %+v, want lost (worker lost), no attempt", j)
	}
	if r := runCLI(t, c.env(), "worker", "get", "ws"); r.code != 1 || !strings.Contains(r.stderr, "NOT_FOUND") {
		t.Fatalf("get a deregistered worker: exit %d, stderr %q", r.code, r.stderr)
	}
	if out := c.cli(t, "worker", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("worker list after deregistration: %q", out)
	}
	if err := os.WriteFile(never, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The commands end now, and their supervisors (which outlived the
	// worker) write each job's result into the worker's state directory,
	// last: waited for, so they write nothing while the test removes it.
	for _, token := range []uint64{running.Token, runJob.Token} {
		result := filepath.Join(c.jobsDir("ws"), fmt.Sprint(token), "result")
		waitFor(t, jobBound, "the supervisor's result", func() error {
			_, err := os.Stat(result)
			return err
		})
	}
}

// rowOf returns the fields of the table row whose first field is id.
func rowOf(table, id string) []string {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			return f
		}
	}
	return nil
}
