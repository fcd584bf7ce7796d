package fsm

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// setLevel records one node of the given level: the node table's lowest
// level is the cluster's.
func (m *machine) setLevel(node string, level uint8) {
	m.t.Helper()
	m.do(&SetNode{NodeID: node, RaftAddr: node + ":7001", APIAddr: node + ":7000", Level: level, Version: "v"})
}

// failOut fails the job's every attempt retryably, the last with message.
func (m *machine) failOut(id, worker, message string) Grant {
	m.t.Helper()
	var g Grant
	for {
		g = m.acquireOne(worker)
		if g.Job.ID != id {
			m.t.Fatalf("granted %s, want %s", g.Job.ID, id)
		}
		res := m.do(&Report{WorkerID: worker, JobID: id, Token: g.Lease.Token, ReportID: "r" + g.Lease.WorkerID + id +
			string(rune('a'+g.Job.Attempts)), Outcome: OutcomeFailed, Retryable: true, Ref: "log-" + id, Message: message}).(ReportResult)
		if !res.Requeued {
			return g
		}
	}
}

// The determinism rule: below level 6 (none recorded, or a node at 5) a
// job out of attempts ends reported and a poison job failed, exactly as
// before; from level 6 both end dead with their last error.
func TestExhaustedJobEndsDeadOnlyFromLevel6(t *testing.T) {
	for _, tc := range []struct {
		name   string
		levels []uint8
		dead   bool
	}{
		{"no level recorded", nil, false},
		{"a node at level 5", []uint8{6, 5, 6}, false},
		{"every node at level 6", []uint8{6, 6, 6}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			for i, lv := range tc.levels {
				m.setLevel(string(rune('a'+i)), lv)
			}
			m.register("w", 1)
			m.submit(spec("out"))
			m.failOut("out", "w", "exit 75")
			poison := spec("poison")
			poison.MaxWorkerLosses = 1
			m.submit(poison)
			g := m.acquireOne("w")
			m.do(&Expire{Leases: []LeaseRef{{JobID: "poison", Token: g.Lease.Token}}})

			out, p := m.job("out"), m.job("poison")
			if !tc.dead {
				if out.State != JobReported || out.Reason() != "" || p.State != JobFailed || p.Reason() != ReasonPoison {
					t.Fatalf("below level 6: out %s %q, poison %s %q; want reported, failed", out.State, out.Reason(), p.State, p.Reason())
				}
				if _, ok := m.lastEvent(EventJobDead); ok {
					t.Fatal("a job.dead event below level 6")
				}
				return
			}
			if out.State != JobDead || out.Reason() != "out of attempts (3 of 3): exit 75" {
				t.Fatalf("out of attempts: %s %q", out.State, out.Reason())
			}
			if l := out.Leases()[len(out.Leases())-1]; l.Answer != JobDead || l.Message() != "exit 75" || l.Ref() != "log-out" {
				t.Fatalf("its last lease keeps the last error: %v", l)
			}
			if p.State != JobDead || p.Reason() != ReasonPoison+" (1)" {
				t.Fatalf("poison: %s %q", p.State, p.Reason())
			}
			ev, ok := m.lastEvent(EventJobDead)
			if !ok || ev.JobID != "poison" || ev.Detail != p.Reason() {
				t.Fatalf("job.dead event: %+v", ev)
			}
			// A failure that is not retryable is the worker's final word.
			m.submit(spec("final"))
			g = m.acquireOne("w")
			m.report(g, "final", OutcomeFailed, false)
			if j := m.job("final"); j.State != JobReported {
				t.Fatalf("a non-retryable failure ends %s", j.State)
			}
			// Dead jobs stay through compaction, and in a snapshot.
			m.advance(int64(time.Hour))
			m.do(&Compact{JobsBefore: m.now, Limit: MaxCompactBatch})
			if _, err := m.f.Job("final"); err == nil {
				t.Fatal("compaction kept a reported job")
			}
			if m.f.Stats().Jobs[JobDead] != 2 {
				t.Fatalf("compaction took dead jobs: %v", m.f.Stats().Jobs)
			}
			if jobs, _ := m.f.Jobs(JobFilter{State: JobDead}); len(jobs) != 2 {
				t.Fatalf("listing dead jobs: %d", len(jobs))
			}
			m.roundTrip()
		})
	}
}

func TestRetryDeadJob(t *testing.T) {
	m := newMachine(t)
	m.setLevel("a", 6)
	m.register("w", 1)
	s := spec("j")
	s.Retry = &RetryPolicy{Initial: int64(time.Second), Max: int64(time.Second), Multiplier: 1000}
	m.submit(s)
	m.submit(spec("other"))
	m.fail(&RetryJob{JobID: "nojob"}, ErrNotFound)
	m.fail(&RetryJob{JobID: "j"}, ErrNotDead) // queued
	var last Grant
	for i := 0; m.job("j").State != JobDead; i++ {
		last = m.acquireOne("w")
		m.report(last, "r"+string(rune('a'+i)), OutcomeFailed, true)
		m.advance(int64(time.Second))
	}
	m.roundTrip()
	before := m.job("j")
	got := m.do(&RetryJob{JobID: "j", Reason: "fixed"}).(Job)
	if got.State != JobQueued || got.Attempts != 0 || got.Losses != 0 || got.NotBefore != 0 || got.Reason() != "" ||
		got.FinishSeq() != 0 || got.FinishedAt() != 0 || len(got.Leases()) != len(before.Leases()) {
		t.Fatalf("retried: %+v", got)
	}
	if ev, ok := m.lastEvent(EventJobRetried); !ok || ev.JobID != "j" {
		t.Fatalf("job.retried: %+v", ev)
	}
	m.fail(&RetryJob{JobID: "j"}, ErrNotDead) // queued again
	// A fresh budget: the next grant has a larger token and is attempt 1.
	g := m.acquireOne("w")
	if g.Job.ID != "j" || g.Lease.Token <= last.Lease.Token {
		t.Fatalf("after retry granted %s token %d (last %d)", g.Job.ID, g.Lease.Token, last.Lease.Token)
	}
	m.report(g, "ok", OutcomeSucceeded, false)
	if j := m.job("j"); j.State != JobReported || j.Executions() != 1 {
		t.Fatalf("after the retry: %s, %d executions", j.State, j.Executions())
	}
	m.roundTrip()
}

// killDead submits a job of one attempt to queue and has worker fail it:
// the job ends dead (at level 6).
func (m *machine) killDead(worker, id, queue string) {
	m.t.Helper()
	s := spec(id)
	s.Queue, s.MaxAttempts = queue, 1
	m.submit(s)
	g := m.do(&Acquire{WorkerID: worker, RequestID: "req-" + id, Queues: []string{queue}, Max: 1}).(AcquireResult).Grants[0]
	m.report(g, "r-"+id, OutcomeFailed, true)
}

func TestPurgeDeadJobs(t *testing.T) {
	m := newMachine(t)
	m.setLevel("a", 6)
	m.register("w", 1)
	kill := func(id, queue string) { m.killDead("w", id, queue) }
	kill("a1", "a")
	kill("b1", "b")
	m.advance(int64(time.Hour))
	kill("a2", "a")
	kill("a3", "a")
	m.submit(spec("alive"))

	// By ids: the one not dead and the unknown one are skipped.
	res := m.do(&PurgeJobs{JobIDs: []string{"a3", "alive", "nojob", "a3"}, Limit: 1}).(PurgeResult)
	if strings.Join(res.Purged, ",") != "a3" || strings.Join(res.Skipped, ",") != "alive,nojob,a3" || res.More {
		t.Fatalf("by ids: %+v", res)
	}
	// By age: only those that died over half an hour ago.
	res = m.do(&PurgeJobs{OlderThan: int64(30 * time.Minute), Limit: 1}).(PurgeResult)
	if strings.Join(res.Purged, ",") != "a1" || !res.More {
		t.Fatalf("by age, limit 1: %+v", res)
	}
	m.roundTrip()
	// By queue: a2 (b1 is in another queue).
	res = m.do(&PurgeJobs{Queue: "a", Limit: 10}).(PurgeResult)
	if strings.Join(res.Purged, ",") != "a2" || res.More {
		t.Fatalf("by queue: %+v", res)
	}
	if ev, ok := m.lastEvent(EventJobsPurged); !ok || ev.Detail != "1 dead jobs" {
		t.Fatalf("jobs.purged: %+v", ev)
	}
	res = m.do(&PurgeJobs{Limit: 10}).(PurgeResult)
	if strings.Join(res.Purged, ",") != "b1" || res.More {
		t.Fatalf("everything left: %+v", res)
	}
	if st := m.f.Stats(); st.Jobs[JobDead] != 0 || st.Jobs[JobQueued] != 1 {
		t.Fatalf("after the purges: %v", st.Jobs)
	}
}

// A dead job needs snapshot version 6 (an older build refuses its state),
// even if the node table says a lower level since.
func TestSnapshotWithDeadJobIsVersion6(t *testing.T) {
	m := newMachine(t)
	m.setLevel("a", 6)
	m.register("w", 1)
	s := spec("j")
	s.MaxAttempts = 1
	m.submit(s)
	m.report(m.acquireOne("w"), "r", OutcomeFailed, true)
	m.setLevel("b", 5)
	var buf bytes.Buffer
	snap := m.f.Snapshot()
	defer snap.Release()
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if v, _ := SnapshotVersion(bytes.NewReader(buf.Bytes())); v != 6 {
		t.Fatalf("snapshot version %d, want 6", v)
	}
	m.roundTrip()
	if j := m.job("j"); j.State != JobDead {
		t.Fatalf("restored: %s", j.State)
	}
}

// A purge costs the jobs it removes, not the dead jobs it keeps: a purge
// of one queue walks only that queue's dead jobs (its own index), and a
// purge by ids or a retry takes a job out of the indexes by a binary
// search, leaving a tombstone, not a rewrite. Tombstones never change an
// answer: a replica restored from a snapshot (none) purges exactly as the
// one that applied every entry.
func TestPurgeWalksOnlyItsQueue(t *testing.T) {
	m := newMachine(t)
	m.setLevel("a", 6)
	m.register("w", 8)
	kill := func(id, queue string) { m.killDead("w", id, queue) }
	for i := range 200 {
		kill(fmt.Sprint("a", i), "a")
	}
	kill("b0", "b")
	kill("b1", "b")
	st := m.f.st
	if d := st.deadBy["b"]; d == nil || d.live != 2 || len(d.items) != 2 || st.dead.live != 202 {
		t.Fatalf("dead indexes: all %d, b %+v", st.dead.live, d)
	}
	// Out of the middle: tombstones, found by binary search.
	m.do(&RetryJob{JobID: "a100"})
	res := m.do(&PurgeJobs{JobIDs: []string{"a50", "a50"}, Limit: 2}).(PurgeResult)
	if strings.Join(res.Purged, ",") != "a50" || strings.Join(res.Skipped, ",") != "a50" {
		t.Fatalf("by ids: %+v", res)
	}
	if st := m.f.st; len(st.dead.items) != 202 || st.dead.live != 200 || st.deadBy["a"].live != 198 {
		t.Fatalf("after a retry and a purge by id: %d entries, %d live", len(st.dead.items), st.dead.live)
	}
	// Queue b's dead jobs are behind 200 of queue a's in death order.
	res = m.do(&PurgeJobs{Queue: "b", Limit: 1}).(PurgeResult)
	if strings.Join(res.Purged, ",") != "b0" || !res.More {
		t.Fatalf("queue b, limit 1: %+v", res)
	}
	twin := New()
	if err := twin.Restore(bytes.NewReader(snapshotBytes(t, m.f))); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*PurgeJobs{{Queue: "b", Limit: 5}, {Queue: "a", Limit: 60}, {Limit: 100}, {Limit: 100}, {Queue: "b", Limit: 1}} {
		res := m.do(c).(PurgeResult)
		data, _ := Encode(m.now, c)
		tres, err := twin.Apply(m.index, data)
		if err != nil || !reflect.DeepEqual(res, tres) {
			t.Fatalf("%+v: applied %+v, restored %+v (%v)", c, res, tres, err)
		}
	}
	if m.f.Hash() != twin.Hash() {
		t.Fatal("the replica restored without tombstones hashes differently")
	}
	if st := m.f.Stats(); st.Jobs[JobDead] != 0 || len(m.f.st.deadBy) != 0 || len(m.f.st.dead.items) != 0 {
		t.Fatalf("after the purges: %v dead, %d queue indexes, %d entries", st.Jobs[JobDead], len(m.f.st.deadBy), len(m.f.st.dead.items))
	}
}
