package e2e

import (
	"fmt"
	"strings"
	"testing"
)

type scheduleJSON struct {
	Name      string   `json:"name"`
	Cron      string   `json:"cron"`
	TimeZone  string   `json:"time_zone"`
	Missed    string   `json:"missed"`
	Paused    bool     `json:"paused"`
	Queue     string   `json:"queue"`
	Kind      string   `json:"kind"`
	Payload   string   `json:"payload"`
	LastSlot  string   `json:"last_slot"`
	Fired     uint64   `json:"fired"`
	LastJob   string   `json:"last_job"`
	NextSlots []string `json:"next_slots"`
}

// TestSchedules: schedule create (a seconds-resolution expression, so a
// slot comes within seconds), get, list, pause, resume and delete through
// the CLI; the slot's job is NAME@SLOT with the template's payload.
func TestSchedules(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)

	var sc scheduleJSON
	decodeJSON(t, "schedule create", c.cli(t, "schedule", "create", "tick", "-o", "json", "--cron", "*/2 * * * * *",
		"--tz", "Europe/Paris", "--missed", "run-latest", "--queue", "cron", "--kind", "report", "--payload", "hello"), &sc)
	if sc.Name != "tick" || sc.TimeZone != "Europe/Paris" || sc.Missed != "run-latest" || sc.Queue != "cron" ||
		sc.Payload != "hello" || len(sc.NextSlots) != 3 {
		t.Fatalf("created %+v", sc)
	}
	// The same again is the same schedule; another definition is refused.
	c.cli(t, "schedule", "create", "tick", "--cron", "*/2 * * * * *", "--tz", "Europe/Paris", "--missed", "run-latest",
		"--queue", "cron", "--kind", "report", "--payload", "hello")
	if r := runCLI(t, c.env(), "schedule", "create", "tick", "--cron", "* * * * *", "--queue", "cron"); r.code == 0 ||
		!strings.Contains(r.stderr, "another definition") {
		t.Fatalf("create with another definition: exit %d, %s", r.code, r.stderr)
	}
	if r := runCLI(t, c.env(), "schedule", "create", "bad", "--cron", "61 * * * *"); r.code == 0 || !strings.Contains(r.stderr, "cron") {
		t.Fatalf("create with a bad expression: exit %d, %s", r.code, r.stderr)
	}

	waitFor(t, jobBound, "the schedule to fire a slot", func() error {
		decodeJSON(t, "schedule get", c.cli(t, "schedule", "get", "tick", "-o", "json"), &sc)
		if sc.Fired == 0 {
			return fmt.Errorf("fired %d", sc.Fired)
		}
		return nil
	})
	if !strings.HasPrefix(sc.LastJob, "tick@") {
		t.Fatalf("last job %q", sc.LastJob)
	}
	if j := c.job(t, sc.LastJob); j.Queue != "cron" || j.Kind != "report" || j.Payload != "hello" {
		t.Fatalf("the slot's job: %+v", j)
	}

	if out := c.cli(t, "schedule", "list"); !strings.Contains(out, "tick") || !strings.Contains(out, "*/2 * * * * *") {
		t.Fatalf("schedule list:\n%s", out)
	}
	decodeJSON(t, "schedule pause", c.cli(t, "schedule", "pause", "tick", "-o", "json"), &sc)
	if !sc.Paused || len(sc.NextSlots) != 0 {
		t.Fatalf("paused %+v", sc)
	}
	decodeJSON(t, "schedule resume", c.cli(t, "schedule", "resume", "tick", "-o", "json"), &sc)
	if sc.Paused || len(sc.NextSlots) == 0 {
		t.Fatalf("resumed %+v", sc)
	}
	c.cli(t, "schedule", "delete", "tick")
	if r := runCLI(t, c.env(), "schedule", "get", "tick"); r.code == 0 {
		t.Fatal("a deleted schedule is still shown")
	}
	if out := c.cli(t, "events", "--type", "schedule.fired"); !strings.Contains(out, "tick@") {
		t.Fatalf("events --type schedule.fired:\n%s", out)
	}
}
