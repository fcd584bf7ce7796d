package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testbin"
	"github.com/leasehold/leasehold/internal/testwait"
)

// oldBinEnv names a leasehold binary built from a commit before levels
// (make upgrade-test builds one); without it the upgrade test is skipped.
const oldBinEnv = "LEASEHOLD_E2E_OLD_BIN"

// A rolling upgrade from a build before levels (issue 15's proof). With one
// voter on the old build the cluster serves, the old node applies every
// entry the others write and stays up, and a request whose entry needs
// more than level 2 (a worker deregistered as lost, codec 3) is refused
// UPGRADE_REQUIRED naming it: a node that says no level counts as level 2
// (the old build here happens to decode codec 3, but not 4: the gate does
// not know which build it is, so it takes the lowest). Once it runs this build too, the
// levels are recorded and the same request goes through.
func TestMixedClusterUpgrade(t *testing.T) {
	c, oldNode := startMixed(t, oldBinEnv)

	// Work goes on: a run-style job submitted, leased and reported by a
	// worker of the new build; every node applies it.
	c.cli(t, "job", "submit", "--id", "mixed-1", "--kind", "run", "--payload", "x")
	w := c.startWorker(t, "mw", "--once", "--", "true")
	if code := w.Wait(t, jobBound); code != 0 {
		t.Fatalf("worker exited %d", code)
	}
	c.waitJob(t, "mixed-1", "reported")

	// A leader of the old build writes only what it knows, which every
	// newer build applies; the gate is a new leader's. Hand leadership to
	// a node of this build.
	leadFromNewBuild(t, c, oldNode)
	// A deregistration as lost needs codec 3, more than level 2: refused,
	// naming node-3.
	r := runCLI(t, c.env(), "worker", "deregister", "mw")
	if r.code == 0 || !strings.Contains(r.stderr, "UPGRADE_REQUIRED") || !strings.Contains(r.stderr, "node-3 (level 2") {
		t.Fatalf("deregister as lost in a mixed cluster: exit %d, %s", r.code, r.stderr)
	}
	// A job to run later needs codec 5: refused too. A plain submit goes
	// on, without the default retry policy an old node could not apply.
	r = runCLI(t, c.env(), "job", "submit", "--id", "mixed-later", "--in", "1m")
	if r.code == 0 || !strings.Contains(r.stderr, "UPGRADE_REQUIRED") || !strings.Contains(r.stderr, "node-3") {
		t.Fatalf("submit --in in a mixed cluster: exit %d, %s", r.code, r.stderr)
	}
	c.cli(t, "job", "submit", "--id", "mixed-2")
	if out := c.cli(t, "job", "get", "-o", "json", "mixed-2"); strings.Contains(out, `"retry"`) {
		t.Fatalf("a job submitted in a mixed cluster carries a retry policy:\n%s", out)
	}
	if oldNode.exited() {
		t.Fatalf("the old node stopped: %s", oldNode.log())
	}
	if levels := memberLevels(t, c); levels["node-1"] != 0 || levels["node-3"] != 0 {
		t.Fatalf("levels recorded while node-3 cannot apply the record: %v", levels)
	}

	// node-3 upgraded in place: same data, this build.
	if err := c.lc.Upgrade(oldNode.i, testbin.Leasehold(t), testwait.Bound(exitBound)); err != nil {
		t.Fatal(err)
	}
	c.waitReady(t)
	waitFor(t, jobBound, "every node's level recorded", func() error {
		levels := memberLevels(t, c)
		for _, id := range []string{"node-1", "node-2", "node-3"} {
			if levels[id] < 5 {
				return fmt.Errorf("levels %v", levels)
			}
		}
		return nil
	})
	c.cli(t, "worker", "deregister", "mw")
	var later jobJSON
	decodeJSON(t, "job submit --in", c.cli(t, "job", "submit", "-o", "json", "--id", "mixed-later", "--in", "1m"), &later)
	if later.State != "scheduled" {
		t.Fatalf("submit --in after the upgrade: %+v", later)
	}
	if out := c.cli(t, "job", "get", "-o", "json", "mixed-later"); !strings.Contains(out, `"retry"`) {
		t.Fatalf("a job submitted after the upgrade has no default retry policy:\n%s", out)
	}
	for _, n := range c.nodes {
		if n.exited() {
			t.Fatalf("%s stopped: %s", n.id, n.log())
		}
	}
}

// memberLevels is each member's recorded level, from `cluster members`.
func memberLevels(t *testing.T, c *cluster) map[string]int {
	t.Helper()
	var members []struct {
		ID    string `json:"id"`
		Level int    `json:"level"`
	}
	if err := json.Unmarshal([]byte(c.cli(t, "cluster", "members", "-o", "json")), &members); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range members {
		out[m.ID] = m.Level
	}
	return out
}

// oldBin5Env names a leasehold binary of level 5, the last build before
// dead letters, timeouts, queues and schedules (make upgrade-test builds
// one).
const oldBin5Env = "LEASEHOLD_E2E_OLD5_BIN"

// A rolling upgrade from level 5 to this build's level. With one voter of
// level 5, every node applies every entry alike: a job out of attempts
// ends reported, as that node's build ends it (the dead-letter rule waits
// for the whole cluster), and what only level 6 can carry is refused
// UPGRADE_REQUIRED naming it. Once it runs this build, the same job ends
// dead and retries.
func TestMixedClusterLevel6(t *testing.T) {
	c, oldNode := startMixed(t, oldBin5Env)
	leadFromNewBuild(t, c, oldNode)
	waitFor(t, readyBound, "the levels recorded", func() error {
		if levels := memberLevels(t, c); levels["node-1"] < 6 || levels["node-3"] != 5 {
			return fmt.Errorf("levels %v", levels)
		}
		return nil
	})

	exhaust := func(id string) jobJSON {
		t.Helper()
		c.cli(t, "job", "submit", "--id", id, "--queue", id, "--max-attempts", "1")
		w := c.startWorker(t, "w-"+id, "--once", "--queue", id, "--", "sh", "-c", "exit 75")
		if code := w.Wait(t, jobBound); code != 75 {
			t.Fatalf("worker exited %d, want 75", code)
		}
		return c.job(t, id)
	}
	if j := exhaust("mixed-out"); j.State != "reported" || j.Outcome != "failed" {
		t.Fatalf("a job out of attempts in a mixed cluster: %+v, want reported failed", j)
	}
	r := runCLI(t, c.env(), "job", "retry", "mixed-out")
	if r.code == 0 || !strings.Contains(r.stderr, "UPGRADE_REQUIRED") || !strings.Contains(r.stderr, "node-3 (level 5") {
		t.Fatalf("job retry in a mixed cluster: exit %d, %s", r.code, r.stderr)
	}
	for _, args := range [][]string{{"queue", "pause", "mixed-out"}, {"queue", "limit", "mixed-out", "--max-running", "2"},
		{"job", "submit", "--id", "mixed-timeout", "--timeout", "1m"}} {
		if r := runCLI(t, c.env(), args...); r.code == 0 || !strings.Contains(r.stderr, "UPGRADE_REQUIRED") {
			t.Fatalf("%v in a mixed cluster: exit %d, %s", args, r.code, r.stderr)
		}
	}
	if oldNode.exited() {
		t.Fatalf("the level-5 node stopped: %s", oldNode.log())
	}

	if err := c.lc.Upgrade(oldNode.i, testbin.Leasehold(t), testwait.Bound(exitBound)); err != nil {
		t.Fatal(err)
	}
	c.waitReady(t)
	waitFor(t, jobBound, "every node's level recorded", func() error {
		for id, l := range memberLevels(t, c) {
			if l < 6 {
				return fmt.Errorf("%s at level %d", id, l)
			}
		}
		return nil
	})
	if j := exhaust("upgraded-out"); j.State != "dead" {
		t.Fatalf("a job out of attempts after the upgrade: %+v, want dead", j)
	}
	c.cli(t, "job", "retry", "upgraded-out")
	c.cli(t, "queue", "pause", "upgraded-out")
	for _, n := range c.nodes {
		if n.exited() {
			t.Fatalf("%s stopped: %s", n.id, n.log())
		}
	}
}

// startMixed starts 3 nodes, node-3 of the older build the environment
// variable names (skipped without it), and returns node-3.
func startMixed(t *testing.T, env string) (*cluster, *node) {
	t.Helper()
	old := os.Getenv(env)
	if old == "" {
		t.Skipf("%s is not set (make upgrade-test sets it)", env)
	}
	t.Parallel()
	c := startClusterOf(t, &cluster{stateHome: t.TempDir(), binOf: func(id string) string {
		if id == "node-3" {
			return old
		}
		return ""
	}}, 3, "")
	return c, c.node("node-3")
}

// leadFromNewBuild hands leadership to node-1 if the old node leads: a
// leader of the old build writes only what it knows, and the level gate is
// a new leader's.
func leadFromNewBuild(t *testing.T, c *cluster, oldNode *node) {
	t.Helper()
	if leader := c.waitReady(t); leader == oldNode {
		c.cli(t, "cluster", "transfer-leader", "node-1")
		waitFor(t, readyBound, "node-1 to lead", func() error {
			if leader := c.waitReady(t); leader.id != "node-1" {
				return fmt.Errorf("%s leads", leader.id)
			}
			return nil
		})
	}
}
