package checker

import (
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// checkScheduleOnce (I14): each schedule slot fired at most once.
//
// The cluster's event log says what the leaders did with each schedule:
// a schedule.fired event per slot fired (its job is NAME@SLOT, the slot in
// RFC 3339, UTC) and a schedule.skipped event per run of slots settled
// without a job ("NAME: N slots through SLOT skipped"). Read in seq order
// (the order of the log, whichever leader wrote each), no slot's job may
// be fired twice, and a schedule's slots only move forward: a slot fired
// at or before a slot already fired or skipped through was fired again, or
// late, by a leader that did not see what an earlier one settled. A
// schedule deleted and created again under its name starts after its
// creation, so its slots move forward too.
func checkScheduleOnce(v *view, r *Result) {
	fired, skips := 0, 0
	firedAt := map[string]evRef{}     // job id -> the event that fired it
	settled := map[string]time.Time{} // schedule -> the latest slot fired or skipped through
	settledBy := map[string]evRef{}
	for _, e := range v.events {
		var name string
		var slot time.Time
		switch e.ev.Type {
		case history.EventScheduleFired:
			fired++
			n, s, ok := slotOfJob(e.ev.JobID)
			if !ok {
				r.note(fmt.Sprintf("schedule.fired event %d names job %q, not NAME@SLOT", e.ev.Seq, e.ev.JobID))
				continue
			}
			if first, dup := firedAt[e.ev.JobID]; dup {
				r.add(fmt.Sprintf("slot %s of schedule %s fired twice: events %d and %d", s.Format(time.RFC3339), n, first.ev.Seq, e.ev.Seq),
					e.ev.JobID, 0, first.idx, e.idx)
				continue
			}
			firedAt[e.ev.JobID] = e
			name, slot = n, s
		case history.EventScheduleSkipped:
			skips++
			n, s, ok := skippedThrough(e.ev.Detail)
			if !ok {
				continue
			}
			name, slot = n, s
		default:
			continue
		}
		if last, ok := settled[name]; ok && !slot.After(last) && e.ev.Type == history.EventScheduleFired {
			r.add(fmt.Sprintf("schedule %s fired slot %s at or before slot %s, settled already by event %d (event %d)",
				name, slot.Format(time.RFC3339), last.Format(time.RFC3339), settledBy[name].ev.Seq, e.ev.Seq),
				e.ev.JobID, 0, settledBy[name].idx, e.idx)
		}
		if last, ok := settled[name]; !ok || slot.After(last) {
			settled[name], settledBy[name] = slot, e
		}
	}
	r.Stats["schedule_slots_fired"] = float64(fired)
	r.Stats["schedule_skips"] = float64(skips)
	r.Stats["schedules"] = float64(len(settled))
	if fired == 0 {
		r.note("no schedule fired a slot: nothing to check")
	}
}

// slotOfJob splits a schedule's job id, NAME@SLOT.
func slotOfJob(id string) (string, time.Time, bool) {
	i := strings.LastIndexByte(id, '@')
	if i <= 0 {
		return "", time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, id[i+1:])
	return id[:i], t, err == nil
}

// skippedThrough reads a schedule.skipped event's detail: "NAME: N slots
// through SLOT skipped...".
func skippedThrough(detail string) (string, time.Time, bool) {
	name, rest, ok := strings.Cut(detail, ": ")
	if !ok {
		return "", time.Time{}, false
	}
	_, rest, ok = strings.Cut(rest, " slots through ")
	if !ok {
		return "", time.Time{}, false
	}
	s, _, _ := strings.Cut(rest, " ")
	t, err := time.Parse(time.RFC3339, s)
	return name, t, err == nil
}
