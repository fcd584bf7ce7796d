package cluster_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// hourlyAt returns an expression that fires once an hour, at a minute about
// half an hour from now by the cluster's wall clock, and its next slot.
func hourlyAt(t *testing.T, c *clustertest.Cluster) (string, time.Time) {
	t.Helper()
	now := c.Nodes[0].Clock.Wall().UTC()
	expr := fmt.Sprintf("0 %d * * * *", now.Add(30*time.Minute).Minute())
	cs, err := cluster.ParseCron(expr, "")
	if err != nil {
		t.Fatal(err)
	}
	return expr, cs.Next(now)
}

func putSchedule(name, expr string, missed fsm.MissedPolicy) *fsm.PutSchedule {
	tmpl := spec("", fsm.LostRequeue)
	tmpl.Payload = []byte(name)
	return &fsm.PutSchedule{Name: name, Cron: expr, Missed: missed, Template: tmpl}
}

// shiftWalls moves every node's wall clock to about at (plus d).
func shiftWalls(c *clustertest.Cluster, at time.Time) {
	d := time.Until(at)
	for _, n := range c.Nodes {
		n.Clock.ShiftWall(d - (n.Clock.Wall().Sub(time.Now())))
	}
}

// firedSlots counts the schedule.fired events of each job on node n.
func firedSlots(n *clustertest.Node) map[string]int {
	out := map[string]int{}
	for _, ev := range n.FSM().Events(0, fsm.MaxEvents).Events {
		if ev.Type == fsm.EventScheduleFired {
			out[ev.JobID]++
		}
	}
	return out
}

func settledThrough(c *clustertest.Cluster, name string, slot time.Time) func() bool {
	return func() bool {
		leader := c.Leader()
		sc, err := leader.FSM().Schedule(name)
		return err == nil && sc.LastSlot >= slot.UnixNano()
	}
}

// TestScheduleSlotFiresOnceAcrossFailover: a slot fires once when the
// leader dies right at it (the new leader fires it), and once when the
// leader dies right after firing it (the new leader does not fire it
// again).
func TestScheduleSlotFiresOnceAcrossFailover(t *testing.T) {
	c := clustertest.New(t, 3)
	expr, slot := hourlyAt(t, c)
	do(t, c, putSchedule("hourly", expr, fsm.MissedSkip))

	// The leader is killed right at the slot, before its loop looks.
	shiftWalls(c, slot.Add(time.Second))
	old := c.Leader()
	c.Kill(old.Index)
	c.WaitFor(10*time.Second, "the new leader to fire the slot", settledThrough(c, "hourly", slot))
	leader := c.Leader()
	id := fsm.ScheduleJobID("hourly", slot.UnixNano())
	if j, err := leader.FSM().Job(id); err != nil || string(j.Payload) != "hourly" {
		t.Fatalf("slot's job: %+v %v", j, err)
	}
	c.Restart(old.Index)

	// The next slot: the leader fires it at its tick and is killed right
	// after; the new leader settles nothing again.
	next := slot.Add(time.Hour)
	shiftWalls(c, next.Add(time.Second))
	leader = c.Leader()
	c.Step(leader.Index, c.Tick(leader.Index))
	c.WaitFor(10*time.Second, "the leader to fire the next slot", settledThrough(c, "hourly", next))
	killed := leader.Index
	c.Kill(killed)
	leader = c.Leader()
	// The new leader's loop looks when it takes office, and on its tick.
	c.Step(leader.Index, c.Tick(leader.Index))
	c.Restart(killed)
	c.Converged()
	fired := firedSlots(leader)
	want := map[string]int{id: 1, fsm.ScheduleJobID("hourly", next.UnixNano()): 1}
	if fmt.Sprint(fired) != fmt.Sprint(want) {
		t.Fatalf("fired %v, want each slot once: %v", fired, want)
	}
	if sc, _ := leader.FSM().Schedule("hourly"); sc.Fired != 2 || sc.Skipped != 0 || sc.LastSlot != next.UnixNano() {
		t.Fatalf("schedule %+v", sc)
	}
}

// TestScheduleMissedSlotsAfterAnOutage: the whole cluster is down across
// five slots. With skip none of them fires; with run_latest the latest
// fires once; either way one entry settles them all.
func TestScheduleMissedSlotsAfterAnOutage(t *testing.T) {
	c := clustertest.New(t, 3)
	expr, slot := hourlyAt(t, c)
	do(t, c, putSchedule("skip", expr, fsm.MissedSkip))
	do(t, c, putSchedule("latest", expr, fsm.MissedRunLatest))
	for i := range c.Nodes {
		c.Kill(i)
	}
	// Back half an hour after the fifth slot: every slot is missed.
	latest := slot.Add(4 * time.Hour)
	shiftWalls(c, latest.Add(30*time.Minute))
	for i := range c.Nodes {
		c.Restart(i)
	}
	c.WaitFor(10*time.Second, "both schedules settled", func() bool {
		return settledThrough(c, "skip", latest)() && settledThrough(c, "latest", latest)()
	})
	leader := c.Leader()
	jobs, _ := leader.FSM().Jobs(fsm.JobFilter{})
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	if want := fsm.ScheduleJobID("latest", latest.UnixNano()); len(ids) != 1 || ids[0] != want {
		t.Fatalf("jobs %v, want only %s", ids, want)
	}
	skip, _ := leader.FSM().Schedule("skip")
	late, _ := leader.FSM().Schedule("latest")
	if skip.Fired != 0 || skip.Skipped != 5 || late.Fired != 1 || late.Skipped != 4 {
		t.Fatalf("skip %+v\nlatest %+v", skip, late)
	}
	var settles int
	for _, ev := range leader.FSM().Events(0, fsm.MaxEvents).Events {
		if ev.Type == fsm.EventScheduleFired || ev.Type == fsm.EventScheduleSkipped {
			settles++
			if ev.Type == fsm.EventScheduleSkipped && !strings.Contains(ev.Detail, "5 slots") {
				t.Errorf("skipped event %q", ev.Detail)
			}
		}
	}
	if settles != 2 {
		t.Fatalf("%d settling events, want one per schedule", settles)
	}
}

// TestScheduleCommandsNeedLevel6: a voter at level 5 holds the schedule
// commands back with UPGRADE_REQUIRED; and FireSchedule never comes from
// outside.
func TestScheduleCommandsNeedLevel6(t *testing.T) {
	c := clustertest.New(t, 3, func(i int, cfg *cluster.Config) {
		if i == 2 {
			cluster.SayLevel(cfg, 5)
		}
		cluster.AskLevelsEvery(cfg, 100*time.Millisecond)
	})
	put := putSchedule("s", "* * * * *", fsm.MissedSkip)
	c.WaitFor(10*time.Second, "the leader to refuse naming node-2", func() bool {
		_, err := c.Leader().Apply(ctx(t), put)
		var up *cluster.UpgradeError
		return errors.As(err, &up) && up.Need == 6 && len(up.Nodes) == 1 && strings.HasPrefix(up.Nodes[0], "node-2")
	})
	if len(c.Leader().FSM().Schedules()) != 0 {
		t.Fatal("a refused put changed the state")
	}
	if _, err := c.Leader().Apply(ctx(t), &fsm.FireSchedule{Name: "s", Slot: 1}); !errors.Is(err, fsm.ErrInvalidArgument) {
		t.Fatalf("fire from outside: %v", err)
	}
}

// TestScheduleRestoreDoesNotFireAgain: a backup taken before a slot fired,
// restored after it, does not fire the slot again: the restore settles
// every slot until the restoring leader's clock.
func TestScheduleRestoreDoesNotFireAgain(t *testing.T) {
	c := clustertest.New(t, 3)
	expr, slot := hourlyAt(t, c)
	do(t, c, putSchedule("hourly", expr, fsm.MissedRunLatest))
	var backup bytes.Buffer
	if _, err := c.Leader().SaveSnapshot(ctx(t), &backup); err != nil {
		t.Fatal(err)
	}
	shiftWalls(c, slot.Add(time.Second))
	leader := c.Leader()
	c.Step(leader.Index, c.Tick(leader.Index))
	c.WaitFor(10*time.Second, "the slot fired", settledThrough(c, "hourly", slot))
	if _, err := c.Leader().RestoreSnapshot(ctx(t), &backup); err != nil {
		t.Fatal(err)
	}
	leader = c.Leader()
	sc, err := leader.FSM().Schedule("hourly")
	if err != nil || sc.LastSlot <= slot.UnixNano() || sc.Fired != 0 {
		t.Fatalf("restored schedule %+v %v: want every slot until the restore settled", sc, err)
	}
	// The restored leader looks again: nothing fires.
	c.Step(leader.Index, c.Tick(leader.Index))
	c.Converged()
	if fired := firedSlots(leader); len(fired) != 0 {
		t.Fatalf("fired after the restore: %v", fired)
	}
}

// TestScheduleQuota: over the state quota a slot is settled without its
// job (the event says why, and it never fires later), and a new schedule
// is refused.
func TestScheduleQuota(t *testing.T) {
	const quota = 2 << 20
	c := clustertest.New(t, 1, func(_ int, cfg *cluster.Config) { cfg.StateQuotaBytes = quota })
	leader := c.Leader()
	expr, slot := hourlyAt(t, c)
	hourly := putSchedule("hourly", expr, fsm.MissedSkip)
	hourly.Template.Payload = make([]byte, fsm.MaxPayloadLen) // as large as the submit refused below
	do(t, c, hourly)
	for i := 0; ; i++ {
		s := spec(fmt.Sprintf("big-%03d", i), fsm.LostRequeue)
		s.Payload = make([]byte, fsm.MaxPayloadLen)
		if _, err := leader.Apply(ctx(t), &fsm.SubmitJob{Spec: s}); errors.Is(err, cluster.ErrQuotaExceeded) {
			break
		} else if err != nil || i > 100 {
			t.Fatalf("filling the state: %v", err)
		}
	}
	big := putSchedule("big", expr, fsm.MissedSkip)
	big.Template.Payload = make([]byte, fsm.MaxPayloadLen)
	if _, err := leader.Apply(ctx(t), big); !errors.Is(err, cluster.ErrQuotaExceeded) {
		t.Fatalf("a schedule over the quota: %v", err)
	}
	shiftWalls(c, slot.Add(time.Second))
	c.Step(leader.Index, c.Tick(leader.Index))
	c.WaitFor(10*time.Second, "the slot settled", settledThrough(c, "hourly", slot))
	sc, _ := leader.FSM().Schedule("hourly")
	if sc.Fired != 0 || sc.Skipped != 1 {
		t.Fatalf("schedule %+v: want the slot skipped", sc)
	}
	if _, err := leader.FSM().Job(fsm.ScheduleJobID("hourly", slot.UnixNano())); err == nil {
		t.Fatal("the slot's job was submitted over the quota")
	}
	var why string
	for _, ev := range leader.FSM().Events(0, fsm.MaxEvents).Events {
		if ev.Type == fsm.EventScheduleSkipped {
			why = ev.Detail
		}
	}
	if !strings.Contains(why, "quota") {
		t.Fatalf("skipped event %q: want the quota named", why)
	}
}
