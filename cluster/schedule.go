package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold/fsm"
)

// Schedules (cron). The state machine keeps each schedule and the time
// through which its slots are settled (fsm.Schedule.LastSlot); it never
// parses an expression. The leader does: while it leads, scheduleLoop
// finds each unpaused schedule's due slots by its own wall clock and
// proposes one FireSchedule per schedule that settles them all, however
// many came due. The state machine ignores a slot at or before LastSlot,
// so a slot fires at most once whichever leader proposes it, and however
// often (a new leader's retry after a failover, a proposal whose outcome
// the old leader never learnt).
//
// Missed slots: a slot more than Config.ScheduleGrace in the past when the
// leader settles it was missed (no leader, or none with a quorum, ran the
// schedules at its time). With policy skip the missed slots are skipped
// and only a slot within the grace fires; with run_latest the latest slot
// fires once, late, and the earlier ones are skipped. Either way it is one
// entry and one job at most, never one per missed slot.

// cronParser reads the standard five fields (minute, hour, day of month,
// month, day of week), an optional leading seconds field, and the
// descriptors (@hourly, @daily, @every 90s, ...).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ErrBadSchedule wraps the reasons ParseCron refuses an expression or a
// zone.
var ErrBadSchedule = errors.New("bad schedule")

// CronSchedule is a parsed expression in its zone.
type CronSchedule struct {
	sched cron.Schedule
	loc   *time.Location
}

// ParseCron parses a schedule's expression and time zone ("" is UTC) as
// the leader will, and refuses one that never fires. A zone given inside
// the expression (CRON_TZ=, TZ=) is refused: the zone is its own field.
func ParseCron(expr, zone string) (CronSchedule, error) {
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return CronSchedule{}, fmt.Errorf("%w: give the time zone as the zone, not in the expression", ErrBadSchedule)
	}
	loc, err := loadZone(zone)
	if err != nil || zone == "Local" {
		return CronSchedule{}, fmt.Errorf("%w: unknown time zone %q", ErrBadSchedule, zone)
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return CronSchedule{}, fmt.Errorf("%w: %v", ErrBadSchedule, err)
	}
	cs := CronSchedule{sched: s, loc: loc}
	if cs.Next(time.Now()).IsZero() {
		return CronSchedule{}, fmt.Errorf("%w: %q never fires", ErrBadSchedule, expr)
	}
	return cs, nil
}

// zones caches the time zones loaded: time.LoadLocation reads the zone
// database from disk each time, and the leader parses every schedule at
// each of its ticks. Only zones that load are kept, so the cache is
// bounded by the database (some hundreds of names).
var zones sync.Map // name -> *time.Location

func loadZone(name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err == nil {
		zones.Store(name, loc)
	}
	return loc, err
}

// Next is the first slot after t, or zero if there is none within five
// years (robfig/cron's bound).
func (c CronSchedule) Next(t time.Time) time.Time { return c.sched.Next(t.In(c.loc)) }

// NextSlots lists up to n slots of a schedule after its last settled one
// and not before from: what the API shows.
func NextSlots(sc *fsm.Schedule, from time.Time, n int) []time.Time {
	cs, err := ParseCron(sc.Cron, sc.Zone)
	if err != nil || sc.Paused {
		return nil
	}
	t := time.Unix(0, sc.LastSlot)
	if from.After(t) {
		t = from.Add(-time.Nanosecond)
	}
	var out []time.Time
	for len(out) < n {
		if t = cs.Next(t); t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// maxCountedSlots bounds the slots the leader counts one by one when many
// were missed (a per-second schedule after a day without a leader): past
// it the latest slot is found by searching back from now.
const maxCountedSlots = 10000

// slotPlan is what the leader proposes for one schedule.
type slotPlan struct {
	slot    time.Time // the latest due slot: LastSlot after the fire
	skip    bool      // settle without a job
	skipped int       // slots passed over (with skip, the slot included)
	reason  string
}

// planSlots decides a schedule's due slots at now: due is false when its
// next slot is after now. next is the first slot after what the plan
// settles (zero if none).
func planSlots(cs CronSchedule, lastSlot time.Time, now time.Time, missed fsm.MissedPolicy, grace time.Duration) (plan slotPlan, due bool, next time.Time) {
	first := cs.Next(lastSlot)
	if first.IsZero() || first.After(now) {
		return slotPlan{}, false, first
	}
	latest, count := first, 1
	for {
		t := cs.Next(latest)
		if t.IsZero() || t.After(now) {
			break
		}
		if count == maxCountedSlots {
			latest = latestSlot(cs, latest, now)
			break
		}
		latest, count = t, count+1
	}
	plan = slotPlan{slot: latest, skipped: count - 1}
	late := now.Sub(latest)
	switch {
	case late > grace && missed == fsm.MissedSkip:
		plan.skip, plan.skipped = true, count
		plan.reason = fmt.Sprintf("missed: the latest due slot was %s late (grace %s), policy skip", late.Round(time.Second), grace)
	case late > grace:
		plan.reason = fmt.Sprintf("missed: the latest due slot fired %s late (grace %s), policy run_latest", late.Round(time.Second), grace)
	case count > 1:
		plan.reason = "missed: earlier slots came due while no leader ran the schedules"
	}
	return plan, true, cs.Next(latest)
}

// latestSlot finds the latest slot at or before now, given one (from): it
// looks back from now over windows that double until one holds a slot.
func latestSlot(cs CronSchedule, from, now time.Time) time.Time {
	for w := time.Second; ; w *= 2 {
		start := now.Add(-w)
		if !start.After(from) {
			start = from
		}
		if t := cs.Next(start); !t.IsZero() && !t.After(now) {
			for n := 0; n < maxCountedSlots; n++ {
				u := cs.Next(t)
				if u.IsZero() || u.After(now) {
					break
				}
				t = u
			}
			return t
		}
		if start.Equal(from) {
			return from
		}
	}
}

// maxScheduleWait bounds the schedule loop's sleep: it looks again at
// least this often, whatever it computed (a wall clock may jump).
const maxScheduleWait = time.Minute

// wakeSchedules makes the schedule loop look again now (a schedule was
// created, changed or deleted, or the leader's tick came).
func (n *Node) wakeSchedules() {
	select {
	case n.scheduleWake <- struct{}{}:
	default:
	}
}

// scheduleLoop fires due schedule slots while this term lasts. It looks at
// the start of the term, when woken, and at the earliest next slot (a
// runtime timer: slots are wall-clock times, not the monotonic clock's).
func (n *Node) scheduleLoop(ctx context.Context) {
	for {
		wait := maxScheduleWait
		if next := n.scheduleTick(ctx); !next.IsZero() {
			wait = min(wait, max(next.Sub(n.clock.Wall()), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-n.scheduleWake:
			t.Stop()
		}
	}
}

// scheduleTick settles every due slot and returns the earliest next slot
// over all schedules (zero if none).
func (n *Node) scheduleTick(ctx context.Context) time.Time {
	ls, err := n.established()
	if err != nil {
		return time.Time{}
	}
	log := n.logger.Named("schedule")
	var earliest time.Time
	for _, sc := range n.fsm.ScheduleTimings() {
		if sc.Paused || ctx.Err() != nil {
			continue
		}
		cs, err := ParseCron(sc.Cron, sc.Zone)
		if err != nil {
			// The API checked it; this node's zone database may lack the zone.
			log.Warn("schedule_not_parsed", "schedule", sc.Name, "error", err)
			continue
		}
		now, last := n.clock.Wall(), sc.LastSlot
		if !readSettled {
			last = sc.CreatedAt
		}
		plan, due, next := planSlots(cs, time.Unix(0, last), now, sc.Missed, n.cfg.ScheduleGrace)
		if due {
			if !n.fireSlot(ctx, ls, sc.Name, plan) {
				next = now.Add(time.Second) // try again soon
			}
		}
		if !next.IsZero() && (earliest.IsZero() || next.Before(earliest)) {
			earliest = next
		}
	}
	return earliest
}

// fireSlot proposes the plan for one schedule; false if it did not commit.
func (n *Node) fireSlot(ctx context.Context, ls *leaderState, name string, plan slotPlan) bool {
	cmd := &fsm.FireSchedule{Name: name, Slot: plan.slot.UnixNano(), Skip: plan.skip,
		Skipped: uint32(min(plan.skipped, maxCountedSlots)), Reason: plan.reason}
	sc, err := n.fsm.Schedule(name)
	if err != nil {
		return true // deleted meanwhile: nothing to fire
	}
	if !plan.skip {
		// The slot's job passes the quota as any submit does; refused, the
		// slot is settled without it and the event says why.
		spec := sc.Template
		spec.ID = fsm.ScheduleJobID(sc.Name, cmd.Slot)
		if err := n.checkSubmit(ls, &fsm.SubmitJob{Spec: spec}); err != nil {
			cmd.Skip, cmd.Skipped = true, cmd.Skipped+1
			cmd.Reason = clip("the slot's job was refused: "+err.Error(), fsm.MaxMessageLen)
		}
	}
	v, err := n.raftApply(ctx, cmd)
	log := n.logger.Named("schedule")
	if err != nil {
		log.Warn("schedule_fire_failed_will_retry", "schedule", sc.Name, "slot", plan.slot, "error", err)
		return false
	}
	res := v.(fsm.FireResult)
	log.Info("schedule_slot_settled", "schedule", sc.Name, "slot", plan.slot, "fired", res.Fired, "job", res.JobID,
		"skipped", cmd.Skipped, "reason", res.Reason)
	return true
}
