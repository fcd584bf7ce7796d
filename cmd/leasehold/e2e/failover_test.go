package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// With the leader killed (SIGKILL: no handover), the CLI still works
// against the two nodes left, even with the dead node first in
// --endpoints, and the cluster still has three members and a new leader.
func TestLeaderKilled(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	c.cli(t, "job", "submit", "--id", "before-kill", "--payload", "kept")

	st, err := status(t, c.nodes[0].apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	old := c.node(st.LeaderID)
	if old == nil || old.apiAddr != st.LeaderAPI {
		t.Fatalf("cluster status names leader %s at %s, not a started node", st.LeaderID, st.LeaderAPI)
	}
	old.kill(t)

	eps := []string{old.apiAddr}
	for _, n := range c.nodes {
		if n != old {
			eps = append(eps, n.apiAddr)
		}
	}
	endpoints := strings.Join(eps, ",")
	// The command retries inside its --timeout (15s by default); the loop
	// only bounds the whole thing, and counts how many commands it took.
	cli := func(args ...string) string {
		t.Helper()
		var out string
		attempts := 0
		waitFor(t, 45*time.Second, "leasehold "+strings.Join(args, " "), func() error {
			attempts++
			r := runCLI(t, baseEnv(), append([]string{"--endpoints", endpoints}, args...)...)
			if r.code != 0 {
				return fmt.Errorf("exit %d: %s", r.code, strings.TrimSpace(r.stderr))
			}
			out = r.stdout
			return nil
		})
		t.Logf("leasehold %s: %d attempt(s)", strings.Join(args, " "), attempts)
		return out
	}

	var submitted jobJSON
	decodeJSON(t, "job submit", cli("job", "submit", "--id", "after-kill", "--payload", "new", "-o", "json"), &submitted)
	if submitted.ID != "after-kill" || submitted.State != "queued" {
		t.Fatalf("job submit after the kill: %+v", submitted)
	}
	for id, payload := range map[string]string{"after-kill": "new", "before-kill": "kept"} {
		var j jobJSON
		decodeJSON(t, "job get", cli("job", "get", "-o", "json", id), &j)
		if j.ID != id || j.State != "queued" || j.Payload != payload {
			t.Errorf("job get %s after the kill: %+v", id, j)
		}
	}

	var members []struct {
		ID     string `json:"id"`
		Leader bool   `json:"leader"`
	}
	waitFor(t, readyBound, "cluster members to name a new leader", func() error {
		decodeJSON(t, "cluster members", cli("cluster", "members", "-o", "json"), &members)
		var leaders []string
		for _, m := range members {
			if m.Leader {
				leaders = append(leaders, m.ID)
			}
		}
		if len(members) != 3 || len(leaders) != 1 || leaders[0] == old.id {
			return fmt.Errorf("members %+v, want 3 with one leader other than %s", members, old.id)
		}
		return nil
	})
	if leader := c.waitReady(t); leader == old {
		t.Fatalf("the killed node %s still leads", old.id)
	}
}

// `cluster transfer-leader` with no id names the voter that took over, as
// the deposed leader heard it, not an empty name.
func TestTransferLeaderNamesTheNewLeader(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	old := c.waitReady(t)
	var got struct {
		LeaderID string `json:"leader_id"`
	}
	decodeJSON(t, "cluster transfer-leader", c.cli(t, "cluster", "transfer-leader", "-o", "json"), &got)
	if got.LeaderID == "" || got.LeaderID == old.id || c.node(got.LeaderID) == nil {
		t.Fatalf("transfer-leader from %s answered leader %q", old.id, got.LeaderID)
	}
}
