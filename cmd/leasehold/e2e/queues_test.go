package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// queueJSON is one queue of `queue list -o json`, the fields the tests read.
type queueJSON struct {
	Name       string            `json:"name"`
	Ready      uint64            `json:"ready"`
	Running    uint64            `json:"running"`
	Jobs       map[string]uint64 `json:"jobs"`
	Paused     bool              `json:"paused"`
	MaxRunning uint32            `json:"max_running"`
	Oldest     string            `json:"oldest_ready_since"`
}

func (c *cluster) queue(t *testing.T, name string) queueJSON {
	t.Helper()
	var list struct {
		Queues []queueJSON `json:"queues"`
	}
	decodeJSON(t, "queue list", c.cli(t, "queue", "list", "-o", "json"), &list)
	for _, q := range list.Queues {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("queue list has no %s: %+v", name, list.Queues)
	return queueJSON{}
}

// A paused queue's worker waits; a limit of 1 with the resume lets one job
// through; queue list, cluster status and the events show all of it.
func TestQueuePauseResumeLimit(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	for _, id := range []string{"qa", "qb"} {
		c.cli(t, "job", "submit", "--id", id, "--queue", "qp")
	}
	var set struct {
		Name       string `json:"name"`
		Paused     bool   `json:"paused"`
		MaxRunning uint32 `json:"max_running"`
	}
	decodeJSON(t, "queue pause", c.cli(t, "queue", "pause", "qp", "-o", "json"), &set)
	if set.Name != "qp" || !set.Paused || set.MaxRunning != 0 {
		t.Fatalf("queue pause: %+v", set)
	}
	if q := c.queue(t, "qp"); !q.Paused || q.Ready != 2 || q.Running != 0 || q.Oldest == "" {
		t.Fatalf("paused queue listed as %+v", q)
	}
	// A worker on the paused queue registers and waits.
	w := c.startWorker(t, "wq", "--once", "--queue", "qp", "--kill-after", "500ms", "--drain", "2s", "--", "true")
	waitFor(t, jobBound, "the worker to register", func() error {
		if out := c.cli(t, "worker", "list"); !strings.Contains(out, "wq") {
			return fmt.Errorf("worker list:\n%s", out)
		}
		return nil
	})
	if q := c.queue(t, "qp"); q.Running != 0 || q.Ready != 2 {
		t.Fatalf("a paused queue granted a job: %+v", q)
	}

	if out := c.cli(t, "queue", "limit", "qp", "--max-running", "1"); !strings.Contains(out, "queue qp: paused, max running 1") {
		t.Fatalf("queue limit:\n%s", out)
	}
	if out := c.cli(t, "queue", "resume", "qp"); !strings.Contains(out, "queue qp: running, max running 1") {
		t.Fatalf("queue resume:\n%s", out)
	}
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker run --once exited %d", code)
	}
	q := c.queue(t, "qp")
	if q.Paused || q.MaxRunning != 1 || q.Ready != 1 || q.Jobs["reported"] != 1 {
		t.Fatalf("after the resume: %+v", q)
	}
	var st struct {
		Queues []queueJSON `json:"queues"`
	}
	decodeJSON(t, "cluster status", c.cli(t, "cluster", "status", "-o", "json"), &st)
	if len(st.Queues) != 1 || st.Queues[0].Name != "qp" || st.Queues[0].MaxRunning != 1 {
		t.Fatalf("cluster status queues: %+v", st.Queues)
	}
	if out := c.cli(t, "cluster", "status"); !strings.Contains(out, "MAX RUNNING") || !strings.Contains(out, "qp") {
		t.Fatalf("cluster status has no queue table:\n%s", out)
	}
	if out := c.cli(t, "queue", "limit", "qp", "--max-running", "0"); !strings.Contains(out, "no limit") {
		t.Fatalf("queue limit 0:\n%s", out)
	}
	if out := c.cli(t, "queue", "list"); !strings.Contains(out, "GRANTS/S") || !strings.Contains(out, "qp") {
		t.Fatalf("queue list:\n%s", out)
	}
	events := c.cli(t, "events")
	for _, want := range []string{"queue.paused", "queue.resumed", "queue.limited", "qp: max running 1", "qp: no limit"} {
		if !strings.Contains(events, want) {
			t.Fatalf("events lack %q:\n%s", want, tail(events))
		}
	}
	r := runCLI(t, c.env(), "queue", "pause", "no/slash")
	if r.code == 0 || !strings.Contains(r.stderr, "queue") {
		t.Fatalf("pause of a bad name: exit %d, stderr %q", r.code, r.stderr)
	}
}
