package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

func TestAgo(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0ms ago"},
		{350 * time.Millisecond, "350ms ago"},
		{3*time.Second + 900*time.Millisecond, "3s ago"},
		{4*time.Minute + 5*time.Second, "4m05s ago"},
		{2*time.Hour + 10*time.Minute + 59*time.Second, "2h10m ago"},
		{76 * time.Hour, "3d04h ago"},
	} {
		if got := ago(tc.d); got != tc.want {
			t.Errorf("ago(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// The table shows state, last heard, leases, capacity and version; a worker whose
// presence is unknown (a stale read on a follower) shows "-" for last
// heard, and one worker's table lists its leases.
func TestWorkerTable(t *testing.T) {
	busy := &pb.Worker{Id: "busy", Capacity: 4, State: pb.WorkerState_WORKER_STATE_UNREACHABLE,
		Silence: durationpb.New(75 * time.Second), LastHeard: timestamppb.Now(), LeaseCount: 1,
		Leases: []*pb.LeaseRef{{JobId: "j1", Token: 42}}, Version: "v1.2.3"}
	stale := &pb.Worker{Id: "stale", Capacity: 1}
	views := []workerView{workerViewOf(busy), workerViewOf(stale)}

	var out bytes.Buffer
	writeWorkers(&out, views, false)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[1]), " ") != "busy unreachable 1m15s ago 1 4 v1.2.3" ||
		strings.Join(strings.Fields(lines[2]), " ") != "stale unknown - 0 1 -" {
		t.Fatalf("table:\n%s", out.String())
	}
	if views[1].SilenceMS != nil || views[1].Leases == nil {
		t.Fatalf("unknown presence: %+v (silence_ms must be absent, leases [] not null)", views[1])
	}

	out.Reset()
	writeWorkers(&out, views[:1], true)
	if !strings.Contains(out.String(), "JOB") || !strings.Contains(strings.Join(strings.Fields(out.String()), " "), "j1 42") {
		t.Fatalf("one worker's table lacks its leases:\n%s", out.String())
	}

	out.Reset()
	writeDeregistered(&out, "busy", []endedView{{JobID: "j1", Token: 42, JobState: "queued"}})
	if got := strings.Join(strings.Fields(out.String()), " "); got != "deregistered busy; ended 1 leases: JOB TOKEN JOB STATE j1 42 queued" {
		t.Fatalf("deregistered: %q", got)
	}
}
