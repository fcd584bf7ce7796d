package main

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
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

// hostile is text a submitter, a worker or a command chooses: an escape
// sequence in C0 and in C1 (CSI, OSC), a forged row and column, a
// right-to-left override.
const hostile = "ok\x1b[2J\u009b31m\u009d0;pwned\u009c\nj2\tforged\u202eevil"

// TestTablesEscapeControlCharacters: what the CLI prints of an attacker's
// text reaches the terminal as visible escapes, one row per record.
func TestTablesEscapeControlCharacters(t *testing.T) {
	if got, want := clean(hostile), `ok\x1b[2J\u009b31m\u009d0;pwned\u009c\nj2\tforged\u202eevil`; got != want {
		t.Errorf("clean = %q, want %q", got, want)
	}
	if s := "plain text, ünïcode"; clean(s) != s {
		t.Errorf("clean changed %q", s)
	}

	row := eventView{Seq: 1, Type: "job.cancelled", JobID: "j", Detail: hostile, Ref: hostile}.row()
	if n := len(strings.Split(row, "\t")); n != len(strings.Split(eventHeader, "\t")) || strings.ContainsFunc(row, func(r rune) bool { return r != '\t' && unsafeRune(r) }) {
		t.Errorf("event row %q: %d columns, or a control character", row, n)
	}

	job := &pb.Job{State: pb.JobState_JOB_STATE_DEAD, Reason: hostile, Progress: hostile,
		Spec: &pb.JobSpec{Id: "j", Queue: "q", Kind: "k", Payload: []byte(hostile)}}
	out := captureStdout(t, func() {
		if err := printJobs(cli.NewContext(newApp(), flag.NewFlagSet("t", 0), nil), []*pb.Job{job}, true); err != nil {
			t.Fatal(err)
		}
	})
	if strings.ContainsFunc(out, func(r rune) bool { return r != '\t' && r != '\n' && unsafeRune(r) }) {
		t.Errorf("job get printed a control character:\n%q", out)
	}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if strings.HasPrefix(line, "j2") || strings.Contains(line, "\t") {
			t.Errorf("a forged row or a raw tab: %q", line)
		}
	}
	if !strings.Contains(out, `reason: ok\x1b[2J`) || !strings.Contains(out, `progress: ok\x1b[2J`) || !strings.Contains(out, "payload: (text,") {
		t.Errorf("job get:\n%s", out)
	}
}

// captureStdout is what f writes to os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	return <-done
}
