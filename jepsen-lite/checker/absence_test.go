package checker

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// In the clean scenario w3 last renews j3 (token 3) at 400, so with
// toleration 1 s its expiry may be seen from 1400; grace is 500 ms.

func (b *hb) pause(id string, targets []string, start, stop int64) {
	b.raw(history.Entry{Kind: history.KindFaultStart, Ns: at(start), Process: "nemesis",
		Fault: &history.Fault{ID: id, Type: "sigstop-nodes", Targets: targets, Pause: true}})
	b.raw(history.Entry{Kind: history.KindFaultStop, Ns: at(stop), Process: "nemesis", Fault: &history.Fault{ID: id}})
}

func (b *hb) clockFault(id string, targets []string, start, stop, jumpMs int64, rate float64) {
	b.raw(history.Entry{Kind: history.KindFaultStart, Ns: at(start), Process: "nemesis",
		Fault: &history.Fault{ID: id, Type: "clock-skew", Targets: targets, Clock: true, ClockJumpNs: jumpMs * 1e6, ClockRate: rate}})
	b.raw(history.Entry{Kind: history.KindFaultStop, Ns: at(stop), Process: "nemesis", Fault: &history.Fault{ID: id}})
}

var allNodes = []string{"n1", "n2", "n3"}

// The whole cluster is paused for 800 ms (past grace) after w3's last
// renewal. A leader that applies the absence rule cannot expire j3 before
// 1400 + 800; one that charges the pause to w3 expires it at once when the
// cluster resumes.
func TestI11ClusterPauseIsNotSilence(t *testing.T) {
	k := defaults
	k.j3Expiry = 1350 + 800 // 50 ms early once the pause is discounted
	b := scenario(t, k)
	b.pause("p1", allNodes, 500, 1300)
	rep := Check(b.finish(5000, true), Options{})
	expectOnly(t, rep, "I11")
	res, _ := rep.Result("I11")
	if len(res.Violations) != 1 || res.Violations[0].JobID != "j3" || !strings.Contains(res.Violations[0].Msg, "not counting 800.0ms") {
		t.Fatalf("violations %v", res.Violations)
	}
	if res.Stats["cluster_paused_ms"] != 800 {
		t.Fatalf("stats %v", res.Stats)
	}

	// Seen after toleration plus the pause: the rule was applied.
	k.j3Expiry = 1410 + 800
	b = scenario(t, k)
	b.pause("p1", allNodes, 500, 1300)
	expectOnly(t, Check(b.finish(5000, true), Options{}))
}

// Only stretches in which every node was paused, for longer than grace,
// are discounted: a pause of two nodes of three, or a short one of all,
// leaves a leader (or its timers) running.
func TestI11PartialOrShortPauseStillCounts(t *testing.T) {
	k := defaults
	k.j3Expiry = 1410 + 100
	for name, pause := range map[string]func(b *hb){
		"two of three": func(b *hb) { b.pause("p1", []string{"n1", "n2"}, 500, 1300) },
		"short":        func(b *hb) { b.pause("p1", allNodes, 500, 900) },
		"staggered": func(b *hb) {
			b.pause("p1", []string{"n1", "n2"}, 500, 1300)
			b.pause("p2", []string{"n3"}, 900, 1300)
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := scenario(t, k)
			pause(b)
			expectOnly(t, Check(b.finish(5000, true), Options{}))
		})
	}
	// Two overlapping pauses that together cover every node past grace do
	// count: 600 ms of common pause.
	k.j3Expiry = 1410 + 500
	b := scenario(t, k)
	b.pause("p1", []string{"n1", "n2"}, 500, 1300)
	b.pause("p2", []string{"n3", "n1"}, 700, 1400)
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I11")
}

// A clock that jumps forward by more than grace is a gap the absence rule
// absorbs (a machine that slept): it excuses nothing. One that jumps by
// less may make the expiry that much early; a fast clock by what it gained.
func TestI11ClockFaults(t *testing.T) {
	k := defaults
	k.j3Expiry = 1000 // 400 ms early
	for _, tc := range []struct {
		name   string
		jump   int64
		rate   float64
		start  int64
		stop   int64
		flaged bool
	}{
		{"leader slept past grace", 1200, 0, 600, 2000, true},
		{"small jump covers it", 450, 0, 600, 2000, false},
		{"small jump too small", 300, 0, 600, 2000, true},
		{"small jump before the renewal", 450, 0, 200, 2000, true},
		{"back jump restored within window", -450, 0, 100, 900, false},
		{"fast clock", 0, 1.9, 450, 2000, false}, // 550 ms at +90%: 495 ms gained
		{"slightly fast clock", 0, 1.5, 450, 2000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := scenario(t, k)
			b.clockFault("c1", []string{"n2"}, tc.start, tc.stop, tc.jump, tc.rate)
			rep := Check(b.finish(5000, true), Options{})
			if tc.flaged {
				expectOnly(t, rep, "I11")
			} else {
				expectOnly(t, rep)
			}
			if res, _ := rep.Result("I11"); res.Stats["expiries_excused"] != 0 {
				t.Fatalf("a described clock fault excused an expiry: %v", res.Stats)
			}
		})
	}
	// Gains on different nodes do not add up: only one node decides.
	b := scenario(t, k)
	b.clockFault("c1", []string{"n1"}, 600, 2000, 300, 0)
	b.clockFault("c2", []string{"n2"}, 600, 2000, 300, 0)
	expectOnly(t, Check(b.finish(5000, true), Options{}), "I11")
	// A clock fault that does not say what it did excuses the expiry.
	b = scenario(t, k)
	b.fault("c1", "clock-skew", []string{"n1"}, 600, 2000)
	expectOnly(t, Check(b.finish(5000, true), Options{}))
}
