package cluster_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

func eventsOf(n *clustertest.Node, typ fsm.EventType) int {
	k := 0
	for _, ev := range n.FSM().Events(0, fsm.MaxPageSize).Events {
		if ev.Type == typ {
			k++
		}
	}
	return k
}

// Submits that would take the replicated state past its quota are refused
// (QUOTA_EXCEEDED) and raise an alarm, while everything that frees space
// works; as jobs finish and are compacted the alarm clears and submits are
// taken again. 600 submits of 256 KiB used to grow every replica without
// bound.
func TestStateQuota(t *testing.T) {
	const quota = 4 << 20
	// The quota's alarm is the leader's own, and a new leader would not
	// know of it: Raft's timings of a second keep the one leader through
	// entries of 256 KiB under -race on two cores (CI lost a leader of
	// 200 ms timings 13 submits in).
	c := clustertest.New(t, 3, clustertest.SlowRaft(), func(_ int, cfg *cluster.Config) { cfg.StateQuotaBytes = quota })
	big := func(id string) fsm.JobSpec {
		s := spec(id, fsm.LostRequeue)
		s.Payload = make([]byte, fsm.MaxPayloadLen)
		return s
	}
	// Should leadership still move, a submit whose outcome was lost is
	// proposed again on the next leader (a submit is idempotent).
	submit := func(id string) error {
		return retryOnLeader(c, func(n *clustertest.Node) error {
			_, err := n.Apply(ctx(t), &fsm.SubmitJob{Spec: big(id)})
			return err
		})
	}
	var accepted []string
	var refused error
	for i := range 100 {
		id := fmt.Sprintf("big-%03d", i)
		if err := submit(id); err != nil {
			refused = err
			break
		}
		accepted = append(accepted, id)
	}
	if !errors.Is(refused, cluster.ErrQuotaExceeded) {
		t.Fatalf("after %d submits: %v, want ErrQuotaExceeded", len(accepted), refused)
	}
	leader := c.Leader()
	if size := leader.FSM().Bytes(); size > quota+fsm.MaxPayloadLen+4096 {
		t.Fatalf("state %d bytes, quota %d", size, quota)
	}
	// An idempotent resubmit of an existing job still passes.
	if err := submit(accepted[0]); err != nil {
		t.Fatalf("resubmit of an existing job: %v", err)
	}
	leader = c.Leader()
	c.Step(leader.Index, c.Tick(leader.Index))
	c.WaitFor(10*time.Second, "the alarm", func() bool { return eventsOf(leader, fsm.EventQuotaExceeded) == 1 })

	// Cancelling and compacting frees space; the alarm clears.
	for _, id := range accepted {
		do(t, c, &fsm.Cancel{JobID: id})
	}
	do(t, c, &fsm.Compact{JobsBefore: time.Now().Add(time.Hour).UnixNano(), EventsBefore: 0, Limit: fsm.MaxCompactBatch})
	leader = c.Leader()
	c.Step(leader.Index, c.Tick(leader.Index))
	c.WaitFor(10*time.Second, "the alarm cleared", func() bool { return eventsOf(leader, fsm.EventQuotaCleared) == 1 })
	if err := submit("after"); err != nil {
		t.Fatalf("submit after the state shrank: %v", err)
	}
	c.Converged()
}

// A submitter may be bounded in queued jobs; others are not affected.
func TestQueuedPerSubmitter(t *testing.T) {
	c := clustertest.New(t, 1, func(_ int, cfg *cluster.Config) { cfg.MaxQueuedPerSubmitter = 3 })
	leader := c.Leader()
	sub := func(id, who string) error {
		s := spec(id, fsm.LostRequeue)
		s.Submitter = who
		_, err := leader.Apply(ctx(t), &fsm.SubmitJob{Spec: s})
		return err
	}
	for i := range 3 {
		if err := sub(fmt.Sprint("a", i), "a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub("a3", "a"); !errors.Is(err, cluster.ErrQuotaExceeded) {
		t.Fatalf("a fourth queued job: %v", err)
	}
	if err := sub("b0", "b"); err != nil {
		t.Fatalf("another submitter: %v", err)
	}
	do(t, c, &fsm.Cancel{JobID: "a0"})
	if err := sub("a3", "a"); err != nil {
		t.Fatalf("after one left the queue: %v", err)
	}
}

// A retry queues a dead job again, so it is bounded like a submit: while
// the job's submitter has max_queued_per_submitter queued jobs, RetryJob
// is QUOTA_EXCEEDED and the job stays dead; once one leaves the queue, the
// retry passes.
func TestRetryBoundedByQueuedPerSubmitter(t *testing.T) {
	c := clustertest.New(t, 1, func(_ int, cfg *cluster.Config) {
		cfg.MaxQueuedPerSubmitter = 2
		cluster.AskLevelsEvery(cfg, 100*time.Millisecond)
	})
	c.WaitFor(10*time.Second, "the level recorded", func() bool { return c.Leader().ClusterLevel() == fsm.Level })
	leader := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 1})
	s := spec("dead", fsm.LostRequeue)
	s.Submitter, s.MaxAttempts = "a", 1
	do(t, c, &fsm.SubmitJob{Spec: s})
	g := acquire(t, leader, "w1", "r1")
	do(t, c, &fsm.Report{WorkerID: "w1", JobID: "dead", Token: g.Lease.Token, ReportID: "r1", Outcome: fsm.OutcomeFailed, Retryable: true})
	for i := range 2 {
		s := spec(fmt.Sprint("q", i), fsm.LostRequeue)
		s.Submitter = "a"
		do(t, c, &fsm.SubmitJob{Spec: s})
	}
	if _, err := leader.Apply(ctx(t), &fsm.RetryJob{JobID: "dead"}); !errors.Is(err, cluster.ErrQuotaExceeded) {
		t.Fatalf("a retry past the submitter's bound: %v, want QUOTA_EXCEEDED", err)
	}
	if j, _ := leader.FSM().Job("dead"); j.State != fsm.JobDead || leader.FSM().QueuedBy("a") != 2 {
		t.Fatalf("after the refused retry: %s, %d queued", j.State, leader.FSM().QueuedBy("a"))
	}
	do(t, c, &fsm.Cancel{JobID: "q0"})
	if _, err := leader.Apply(ctx(t), &fsm.RetryJob{JobID: "dead"}); err != nil {
		t.Fatalf("a retry under the bound: %v", err)
	}
}
