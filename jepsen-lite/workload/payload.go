package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Job kinds the workers run. A manual job is taken only by the Reporter.
const (
	KindShort  = "short"  // well under a renew's worth of heartbeats
	KindLong   = "long"   // longer than toleration: spans faults
	KindRun    = "run"    // run-style: lost, not requeued, when its worker is
	KindManual = "manual" // for the Reporter, in QueueManual
	QueueMain  = "default"
	// QueueManual holds the Reporter's jobs, which no worker takes.
	QueueManual = "manual"
	// QueueSchedule holds the jobs of the run's schedule, ScheduleName,
	// which no worker takes either (checker I14 reads its events).
	QueueSchedule = "scheduled"
	ScheduleName  = "jl-tick"
)

// Payload tells a worker's handler what the job does: run for Run,
// writing to both sinks every WriteEvery, then succeed, or fail
// retryably when Fail: after the job's retry policy's backoff, or, with
// SnoozeMs, after that long (a snooze).
type Payload struct {
	RunMs        int64 `json:"run_ms"`
	WriteEveryMs int64 `json:"write_every_ms"`
	Fail         bool  `json:"fail,omitempty"`
	SnoozeMs     int64 `json:"snooze_ms,omitempty"`
}

func (p Payload) run() time.Duration        { return time.Duration(p.RunMs) * time.Millisecond }
func (p Payload) writeEvery() time.Duration { return time.Duration(p.WriteEveryMs) * time.Millisecond }
func (p Payload) snooze() time.Duration     { return time.Duration(p.SnoozeMs) * time.Millisecond }

// Encode is the payload's bytes.
func (p Payload) Encode() []byte {
	b, _ := json.Marshal(p) // a struct of numbers always encodes
	return b
}

// DecodePayload reads a job's payload.
func DecodePayload(b []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(b, &p); err != nil {
		return Payload{}, fmt.Errorf("payload: %w", err)
	}
	if p.RunMs < 0 || p.WriteEveryMs <= 0 || p.SnoozeMs < 0 {
		return Payload{}, fmt.Errorf("payload: run_ms %d, write_every_ms %d, snooze_ms %d", p.RunMs, p.WriteEveryMs, p.SnoozeMs)
	}
	return p, nil
}

// writeFor is an execution's body, the Go worker's and a shell command's
// alike: write(n) at once and every writeEvery, for run, or until ctx
// ends.
func (p Payload) writeFor(ctx context.Context, write func(n int)) {
	end := time.Now().Add(p.run())
	for n := 0; ; n++ {
		write(n)
		wait := min(p.writeEvery(), time.Until(end))
		if wait <= 0 || ctx.Err() != nil {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}
