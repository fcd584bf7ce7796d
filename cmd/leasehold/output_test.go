package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// Tables show times to the second with how far they are from now, and no
// Go syntax.
func TestTableTime(t *testing.T) {
	past := time.Now().Add(-90 * time.Second).UTC()
	got := tableTime(past.Format(time.RFC3339Nano))
	if want := past.Format(time.RFC3339) + " (1m3"; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "s ago)") {
		t.Errorf("tableTime(90s ago) = %q, want %q...s ago)", got, want)
	}
	future := time.Now().Add(2*time.Hour + time.Minute).UTC()
	if got := tableTime(future.Format(time.RFC3339Nano)); !regexp.MustCompile(`^\S+Z \(in 2h0[01]m\)$`).MatchString(got) {
		t.Errorf("tableTime(in 2h01m) = %q", got)
	}
	if strings.Contains(got, ".") {
		t.Errorf("tableTime kept the fraction of a second: %q", got)
	}
	if got := tableTime(""); got != "-" {
		t.Errorf(`tableTime("") = %q, want -`, got)
	}
}

func TestCountsLine(t *testing.T) {
	names := jobStateNames()
	if got := countsLine(names, map[string]uint64{"reported": 4, "queued": 2, "weird": 1, "dead": 0}); got != "queued 2, reported 4, weird 1" {
		t.Errorf("countsLine = %q", got)
	}
	if got := countsLine(names, nil); got != "none" {
		t.Errorf("countsLine(nil) = %q, want none", got)
	}
}

// An event row has every column, "-" for what the event lacks.
func TestEventRow(t *testing.T) {
	row := eventView{Seq: 7, Time: "2026-01-02T03:04:05.123456789Z", Type: "job.submitted", JobID: "j"}.row()
	cols := strings.Split(row, "\t")
	if n := len(strings.Split(eventHeader, "\t")); len(cols) != n {
		t.Fatalf("row %q has %d columns, the header %d", row, len(cols), n)
	}
	if cols[0] != "7" || !strings.HasPrefix(cols[1], "2026-01-02T03:04:05Z (") || cols[3] != "j" || cols[4] != "-" || cols[9] != "-" {
		t.Errorf("row %q", row)
	}
}
