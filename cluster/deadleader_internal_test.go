package cluster

import (
	"strings"
	"testing"
	"time"
)

// Who stands when a leader falls silent: only a follower, only when a
// quorum of the voters (itself included) has heard no leader for the
// bound, and only the one whose log is the most up to date of the silent
// voters (the smallest id among equals), so every silent voter grants it
// its vote.
func TestElectNow(t *testing.T) {
	const after = 450 * time.Millisecond
	silent := func(id string, term, index uint64) leaderView {
		return leaderView{id: id, answered: true, follower: true, silentFor: time.Second, term: 5, lastTerm: term, lastIndex: index}
	}
	hears := func(id string) leaderView {
		return leaderView{id: id, answered: true, follower: true, term: 5, lastTerm: 3, lastIndex: 100}
	}
	later := func(v leaderView) leaderView {
		v.term++
		return v
	}
	candidate := func(id string, term, index uint64) leaderView {
		v := silent(id, term, index)
		v.follower = false
		return v
	}
	standing := func(v leaderView) leaderView {
		v.standing = true
		return v
	}
	for _, tc := range []struct {
		name   string
		self   string
		views  []leaderView
		voters int
		want   bool
	}{
		{"two of three silent, self's log longer", "a", []leaderView{silent("a", 3, 101), silent("b", 3, 100), {id: "c"}}, 3, true},
		{"two of three silent, the other's log longer", "a", []leaderView{silent("a", 3, 100), silent("b", 3, 101), {id: "c"}}, 3, false},
		{"the longer log's voter decides", "b", []leaderView{silent("a", 3, 100), silent("b", 3, 101), {id: "c"}}, 3, true},
		{"a later term beats a longer log", "a", []leaderView{silent("a", 4, 90), silent("b", 3, 101), {id: "c"}}, 3, true},
		{"equal logs: the smallest id", "a", []leaderView{silent("a", 3, 100), silent("b", 3, 100), {id: "c"}}, 3, true},
		{"equal logs: not the larger id", "b", []leaderView{silent("a", 3, 100), silent("b", 3, 100), {id: "c"}}, 3, false},
		{"the other still hears the leader", "a", []leaderView{silent("a", 3, 100), hears("b"), {id: "c"}}, 3, false},
		{"the other did not answer", "a", []leaderView{silent("a", 3, 100), {id: "b"}, {id: "c"}}, 3, false},
		{"the other silent, but not yet for the bound", "a", []leaderView{silent("a", 3, 100), {id: "b", answered: true, follower: true, term: 5, silentFor: after - time.Millisecond}, {id: "c"}}, 3, false},
		{"a candidate with the longest log: nobody stands", "a", []leaderView{silent("a", 3, 100), candidate("b", 3, 101), {id: "c"}}, 3, false},
		{"a candidate with an equal log: the follower stands", "b", []leaderView{candidate("a", 3, 100), silent("b", 3, 100), {id: "c"}}, 3, true},
		{"five voters: two silent are not a quorum", "a", []leaderView{silent("a", 3, 100), silent("b", 3, 100), hears("c"), hears("d"), {id: "e"}}, 5, false},
		{"five voters: three silent are", "a", []leaderView{silent("a", 3, 100), silent("b", 3, 100), silent("c", 3, 99), hears("d"), {id: "e"}}, 5, true},
		{"a single voter elects itself", "a", []leaderView{silent("a", 3, 100)}, 1, false},
		{"a voter still hearing the leader has a longer log: nobody stands", "a", []leaderView{silent("a", 3, 100), silent("b", 3, 100), {id: "c", answered: true, follower: true, term: 5, lastTerm: 3, lastIndex: 101}}, 3, false},
		{"another voter already stood (a later term)", "a", []leaderView{silent("a", 3, 100), later(candidate("b", 3, 100)), {id: "c"}}, 3, false},
		// The race a 2-stand run showed: "a" stood, and its Raft was a
		// candidate still in the old term when "b" asked.
		{"another voter stood, its term not moved yet", "b", []leaderView{standing(candidate("a", 3, 100)), silent("b", 3, 100), {id: "c"}}, 3, false},
		{"another voter stood, still a follower", "b", []leaderView{standing(silent("a", 3, 99)), silent("b", 3, 100), {id: "c"}}, 3, false},
		{"self's own stand does not stop it", "a", []leaderView{standing(silent("a", 3, 100)), silent("b", 3, 100), {id: "c"}}, 3, true},
		{"a voter in a later term, even a silent follower", "a", []leaderView{silent("a", 3, 100), later(silent("b", 3, 90)), silent("c", 3, 90)}, 3, false},
	} {
		if got := electNow(tc.self, tc.views, tc.voters, after); got != tc.want {
			t.Errorf("%s: electNow(%s) = %v, want %v", tc.name, tc.self, got, tc.want)
		}
	}
}

func TestDeadLeaderAfter(t *testing.T) {
	c := DefaultConfig()
	if got, want := c.deadLeaderAfter(), c.HeartbeatTimeout*3/2; got != want {
		t.Fatalf("default %s, want 1.5 x heartbeat_timeout (%s)", got, want)
	}
	c.DeadLeaderAfter = -1
	if got := c.deadLeaderAfter(); got != 0 {
		t.Fatalf("negative: %s, want 0 (never)", got)
	}
	c.DataDir, c.RaftBind, c.APIAddr = t.TempDir(), "127.0.0.1:0", "127.0.0.1:7701"
	c.DeadLeaderAfter = c.HeartbeatTimeout / 2
	if err := c.Validate(); err != nil {
		t.Fatalf("dead_leader_after %s, half of heartbeat_timeout: %v", c.DeadLeaderAfter, err)
	}
	c.DeadLeaderAfter = c.HeartbeatTimeout / 4
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "dead_leader_after") {
		t.Fatalf("dead_leader_after %s under half of heartbeat_timeout %s: %v, want refused naming dead_leader_after", c.DeadLeaderAfter, c.HeartbeatTimeout, err)
	}
}
