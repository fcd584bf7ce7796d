package checker

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// scheduleEvents adds a schedule's settling events to a clean scenario:
// fired slots (seconds past 10:00:00) and skips through a slot.
func scheduleEvents(t *testing.T, evs ...history.ClusterEvent) []history.Entry {
	b := scenario(t, defaults)
	for i, ev := range evs {
		b.event(4000+int64(i), ev)
	}
	return b.finish(5000, true)
}

func firedEv(job string) history.ClusterEvent {
	return history.ClusterEvent{Type: history.EventScheduleFired, JobID: job, Detail: "tick slot"}
}

func skippedEv(detail string) history.ClusterEvent {
	return history.ClusterEvent{Type: history.EventScheduleSkipped, Detail: detail}
}

func TestScheduleOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		evs  []history.ClusterEvent
		bad  string // the violation's words; empty: none
	}{
		{"each slot once", []history.ClusterEvent{firedEv("tick@2027-01-05T10:00:00Z"), firedEv("tick@2027-01-05T10:00:02Z"),
			skippedEv("tick: 3 slots through 2027-01-05T10:00:10Z skipped: missed"), firedEv("tick@2027-01-05T10:00:12Z"),
			firedEv("other@2027-01-05T10:00:00Z")}, ""},
		{"a slot fired twice", []history.ClusterEvent{firedEv("tick@2027-01-05T10:00:00Z"), firedEv("tick@2027-01-05T10:00:02Z"),
			firedEv("tick@2027-01-05T10:00:02Z")}, "fired twice"},
		{"an older slot after a newer one", []history.ClusterEvent{firedEv("tick@2027-01-05T10:00:04Z"),
			firedEv("tick@2027-01-05T10:00:02Z")}, "at or before slot"},
		{"a slot fired after it was skipped", []history.ClusterEvent{skippedEv("tick: 5 slots through 2027-01-05T10:00:10Z skipped: missed"),
			firedEv("tick@2027-01-05T10:00:08Z")}, "at or before slot"},
	} {
		rep := Check(scheduleEvents(t, tc.evs...), Options{})
		if tc.bad == "" {
			expectOnly(t, rep)
			continue
		}
		expectOnly(t, rep, "I14")
		if res, _ := rep.Result("I14"); !strings.Contains(res.Violations[0].Msg, tc.bad) {
			t.Errorf("%s: %+v", tc.name, res.Violations)
		}
	}
}
