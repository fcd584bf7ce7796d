package cluster

import (
	"testing"
	"time"
)

// The table's view of a worker follows its announcements: active while
// heard within grace, unreachable from the tick that announces it until it
// is heard again, gone once silent past toleration; an idle worker not
// heard since takeover is unknown, then unreachable once the leader has
// been in office past grace; a worker the table does not time is unknown.
func TestPresenceFollowsTheTable(t *testing.T) {
	const grace, toleration = time.Second, 3 * time.Second
	t0 := time.Unix(1000, 0)
	wall := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tab := newExpiryTable(expiryTimings{grace, toleration, time.Hour}, t0, []string{"held"}, []string{"idle"})
	tab.heard("busy", at(200*time.Millisecond))

	view := func(d time.Duration) map[string]Presence {
		ids := []string{"held", "idle", "busy", "stranger"}
		ps := tab.presence(ids, at(d), wall.Add(d))
		out := map[string]Presence{}
		for i, id := range ids {
			out[id] = ps[i]
		}
		return out
	}
	p := view(500 * time.Millisecond)
	if p["held"].State != ReachActive || !p["held"].Heard || p["held"].Silence != 500*time.Millisecond {
		t.Fatalf("a holder just after takeover: %+v", p["held"])
	}
	if got, want := p["busy"].LastHeard, wall.Add(200*time.Millisecond); p["busy"].State != ReachActive || !got.Equal(want) {
		t.Fatalf("a worker heard at 200ms: %+v, want last heard %v", p["busy"], want)
	}
	if p["idle"].State != ReachUnknown || p["idle"].Heard {
		t.Fatalf("an idle worker not heard since takeover, within grace: %+v", p["idle"])
	}
	if p["stranger"] != (Presence{}) {
		t.Fatalf("a worker the table does not time: %+v", p["stranger"])
	}

	// Past grace but before the tick announces it: still active.
	tab.heard("busy", at(1100*time.Millisecond))
	if p := view(1100 * time.Millisecond); p["held"].State != ReachActive {
		t.Fatalf("silent past grace, not yet announced: %+v", p["held"])
	}
	tickUntil(tab, at(1100*time.Millisecond))
	p = view(1200 * time.Millisecond)
	if p["held"].State != ReachUnreachable || p["held"].Silence != 1200*time.Millisecond {
		t.Fatalf("announced unreachable: %+v", p["held"])
	}
	if p["busy"].State != ReachActive || p["busy"].Silence != 100*time.Millisecond {
		t.Fatalf("heard again at 1100ms: %+v", p["busy"])
	}
	if p["idle"].State != ReachUnreachable || p["idle"].Heard {
		t.Fatalf("an idle worker unheard for longer than grace of office: %+v", p["idle"])
	}

	// Heard again: active at once, before the tick announces it.
	tab.heard("held", at(1300*time.Millisecond))
	tab.heard("idle", at(1300*time.Millisecond))
	p = view(1400 * time.Millisecond)
	if p["held"].State != ReachActive || p["held"].Silence != 100*time.Millisecond {
		t.Fatalf("an unreachable worker heard again: %+v", p["held"])
	}
	if p["idle"].State != ReachActive || !p["idle"].Heard {
		t.Fatalf("an idle worker heard: %+v", p["idle"])
	}

	// Silent past toleration: gone (its leases expired); a worker unheard
	// since takeover that long too. Heard again: active.
	tab2 := newExpiryTable(expiryTimings{grace, toleration, time.Hour}, t0, []string{"held"}, []string{"idle"})
	tickUntil(tab2, at(toleration+100*time.Millisecond))
	ps := tab2.presence([]string{"held", "idle"}, at(toleration+200*time.Millisecond), wall)
	if ps[0].State != ReachGone || ps[1].State != ReachGone || ps[0].State.String() != "gone" {
		t.Fatalf("silent past toleration: %+v", ps)
	}
	tab2.heard("held", at(toleration+300*time.Millisecond))
	if ps := tab2.presence([]string{"held"}, at(toleration+400*time.Millisecond), wall); ps[0].State != ReachActive {
		t.Fatalf("a gone worker heard again: %+v", ps[0])
	}
}
