package cluster

import (
	"testing"
	"time"
)

// Leader answers from its last answer only for the leader Raft names now,
// and only for hintTTL.
func TestLeaderHintAnswers(t *testing.T) {
	at := time.Unix(1000, 0)
	h := &leaderHint{id: "n1", api: "127.0.0.1:7701", at: at}
	for _, c := range []struct {
		name string
		h    *leaderHint
		lid  string
		now  time.Time
		want bool
	}{
		{"none yet", nil, "n1", at, false},
		{"same leader, fresh", h, "n1", at.Add(hintTTL - time.Millisecond), true},
		{"another leader", h, "n2", at.Add(time.Millisecond), false},
		{"same leader, stale", h, "n1", at.Add(hintTTL), false},
		{"no leader known", h, "", at, false},
	} {
		if got := c.h.answers(c.lid, c.now); got != c.want {
			t.Errorf("%s: answers = %v, want %v", c.name, got, c.want)
		}
	}
}
