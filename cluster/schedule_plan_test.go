package cluster

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/fsm"
)

func TestPlanSlots(t *testing.T) {
	every5m, err := ParseCron("*/5 * * * *", "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	perSecond, err := ParseCron("* * * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		cs        CronSchedule
		last, now time.Time
		missed    fsm.MissedPolicy
		due, skip bool
		slot      time.Time
		skipped   int
		next      time.Time
	}{
		{"not yet", every5m, base, base.Add(4 * time.Minute), fsm.MissedSkip, false, false, time.Time{}, 0, base.Add(5 * time.Minute)},
		{"on time", every5m, base, base.Add(5*time.Minute + time.Second), fsm.MissedSkip, true, false, base.Add(5 * time.Minute), 0, base.Add(10 * time.Minute)},
		{"within grace after missed ones", every5m, base, base.Add(20*time.Minute + 30*time.Second), fsm.MissedSkip, true, false, base.Add(20 * time.Minute), 3, base.Add(25 * time.Minute)},
		{"missed, skip", every5m, base, base.Add(22 * time.Minute), fsm.MissedSkip, true, true, base.Add(20 * time.Minute), 4, base.Add(25 * time.Minute)},
		{"missed, run latest", every5m, base, base.Add(22 * time.Minute), fsm.MissedRunLatest, true, false, base.Add(20 * time.Minute), 3, base.Add(25 * time.Minute)},
		// A day of a per-second schedule: counting stops at the bound, the
		// latest slot is still found.
		{"a day of seconds", perSecond, base, base.Add(24*time.Hour + 1500*time.Millisecond), fsm.MissedRunLatest, true, false, base.Add(24*time.Hour + time.Second), maxCountedSlots - 1, base.Add(24*time.Hour + 2*time.Second)},
	} {
		plan, due, next := planSlots(tc.cs, tc.last, tc.now, tc.missed, time.Minute)
		if due != tc.due || plan.skip != tc.skip || !plan.slot.Equal(tc.slot) || plan.skipped != tc.skipped || !next.Equal(tc.next) {
			t.Errorf("%s: due %v plan %+v next %s; want due %v skip %v slot %s skipped %d next %s",
				tc.name, due, plan, next, tc.due, tc.skip, tc.slot, tc.skipped, tc.next)
		}
	}
}

func TestParseCronRefuses(t *testing.T) {
	for _, expr := range []struct{ cron, zone string }{
		{"", ""}, {"* * *", ""}, {"61 * * * *", ""}, {"0 0 30 2 *", ""}, {"* * * * *", "Mars/Olympus"},
		{"CRON_TZ=Asia/Tokyo * * * * *", ""}, {"* * * * *", "Local"},
	} {
		if _, err := ParseCron(expr.cron, expr.zone); err == nil {
			t.Errorf("ParseCron(%q, %q) accepted", expr.cron, expr.zone)
		}
	}
	for _, expr := range []string{"* * * * *", "*/10 * * * * *", "@hourly", "@every 90s", "0 9 * * MON-FRI"} {
		if _, err := ParseCron(expr, "America/New_York"); err != nil {
			t.Errorf("ParseCron(%q): %v", expr, err)
		}
	}
}

// BenchmarkParseCron is the leader's per-schedule cost at each tick:
// go test -run '^$' -bench ParseCron ./cluster/
func BenchmarkParseCron(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseCron("*/5 * * * *", "Europe/Paris"); err != nil {
			b.Fatal(err)
		}
	}
}
