package cluster_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/cluster/clustertest"
	"github.com/leasehold/leasehold/fsm"
)

// heartbeat sends one heartbeat for the worker's leases to node n.
func heartbeat(t testing.TB, n *clustertest.Node, worker string, held ...fsm.Grant) cluster.HeartbeatResult {
	t.Helper()
	refs := make([]fsm.LeaseRef, len(held))
	for i, g := range held {
		refs[i] = fsm.LeaseRef{JobID: g.Job.ID, Token: g.Lease.Token}
	}
	res, err := n.Heartbeat(ctx(t), worker, refs)
	if err != nil {
		t.Fatalf("heartbeat of %s: %v", worker, err)
	}
	return res
}

func countEvents(n *clustertest.Node, typ fsm.EventType) int {
	count := 0
	for _, ev := range n.FSM().Events(0, fsm.MaxPageSize).Events {
		if ev.Type == typ {
			count++
		}
	}
	return count
}

func liveToken(n *clustertest.Node, job string) uint64 {
	j, err := n.FSM().Job(job)
	if err != nil {
		return 0
	}
	if l, ok := j.CurrentLease(); ok {
		return l.Token
	}
	return 0
}

// Kill the leader: the new leader holds the timers and restarts every
// lease's clock at takeover; nothing expires before toleration after it;
// then the silent worker's lease expires exactly once and a re-grant gets a
// strictly larger token.
func TestFailoverRestartsClocksAndExpiresOnce(t *testing.T) {
	c := clustertest.New(t, 3)
	old := c.Leader()
	do(t, c, &fsm.RegisterWorker{WorkerID: "silent", Capacity: 1})
	do(t, c, &fsm.RegisterWorker{WorkerID: "next", Capacity: 1})
	do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostRequeue)})
	g := acquire(t, old, "silent", "r1")
	heartbeat(t, old, "silent", g)
	// The old leader's clock has run far: its view must not travel.
	c.Run(old.Index, clustertest.Toleration-c.Tick(0))
	c.Converged()

	c.Kill(old.Index)
	leader := c.Leader()
	if st := leader.Status(); st.WorkersTimed != 1 {
		t.Fatalf("new leader times %d workers, want 1", st.WorkersTimed)
	}
	for _, n := range c.Running() {
		if n != leader && n.Status().WorkersTimed != 0 {
			t.Fatalf("follower %d holds timers", n.Index)
		}
	}
	// Just short of toleration after takeover: still live.
	c.Run(leader.Index, clustertest.Toleration-c.Tick(0))
	if liveToken(leader, "a") != g.Lease.Token {
		t.Fatal("lease expired before toleration after takeover")
	}
	// Past it: expired, once.
	c.Run(leader.Index, 3*c.Tick(0))
	c.WaitFor(5*time.Second, "the silent worker's lease to expire", func() bool {
		return liveToken(leader, "a") == 0
	})
	c.Run(leader.Index, clustertest.Toleration)
	if n := countEvents(leader, fsm.EventLeaseExpired); n != 1 {
		t.Fatalf("%d lease.expired events, want 1", n)
	}
	g2 := acquire(t, leader, "next", "r2")
	if g2.Job.ID != "a" || g2.Lease.Token <= g.Lease.Token {
		t.Fatalf("re-grant %s token %d, first token %d", g2.Job.ID, g2.Lease.Token, g.Lease.Token)
	}
	c.Restart(old.Index)
	c.Converged()
}

// A leader that was absent (its clock jumped past grace, or past toleration,
// between two ticks) shifts every deadline by the gap: nothing expires for
// it, and the rule is recorded.
func TestAbsenceRule(t *testing.T) {
	for _, gap := range []time.Duration{clustertest.Grace + 50*time.Millisecond, 2 * clustertest.Toleration} {
		t.Run(gap.String(), func(t *testing.T) {
			c := clustertest.New(t, 3)
			leader := c.Leader()
			do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1})
			do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostFail)})
			g := acquire(t, leader, "w", "r1")
			before := countEvents(leader, fsm.EventAbsenceRule)
			c.Run(leader.Index, clustertest.Toleration/2)
			heartbeat(t, leader, "w", g)
			c.Step(leader.Index, gap) // one jump: the leader was not watching
			c.WaitFor(5*time.Second, "the absence rule event", func() bool {
				return countEvents(leader, fsm.EventAbsenceRule) > before
			})
			c.Run(leader.Index, clustertest.Toleration-c.Tick(0))
			if liveToken(leader, "a") != g.Lease.Token {
				t.Fatal("a lease expired because of the leader's absence")
			}
			// Real silence after the gap is still charged.
			c.Run(leader.Index, 3*c.Tick(0))
			c.WaitFor(5*time.Second, "the lease to expire after real silence", func() bool {
				j, _ := leader.FSM().Job("a")
				return j.State == fsm.JobLost
			})
		})
	}
}

// A deposed leader cut off in a minority can neither acknowledge a
// heartbeat nor propose an expiry (nor anything else), and drops its
// timers. Raft is slow here so the cut-off leader goes on believing it
// leads while its clock runs far past toleration.
func TestDeposedLeaderCannotAckOrExpire(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.SlowRaft())
	old := c.Leader()
	tol := c.Config(old.Index).Toleration
	do(t, c, &fsm.RegisterWorker{WorkerID: "w", Capacity: 1})
	do(t, c, &fsm.SubmitJob{Spec: spec("a", fsm.LostRequeue)})
	g := acquire(t, old, "w", "r1")
	// The takeover's own proposals (the voters' level records, the join
	// audits) are decided while the quorum answers and may land after the
	// cut: the log is measured once they are in it.
	levelsRecorded(t, c, old)
	drainAudits(t, c, old)
	c.Converged()

	others := isolate(c, old)
	before := old.Status().LastIndex
	if st := old.Status(); st.State != "Leader" || !st.Ready {
		t.Fatalf("the cut-off leader stepped down at once (%+v): the test proves nothing", st)
	}
	// While it still leads: a heartbeat, and its clock past toleration.
	hb := make(chan error, 1)
	go func() {
		_, err := old.Heartbeat(ctx(t), "w", []fsm.LeaseRef{{JobID: "a", Token: g.Lease.Token}})
		hb <- err
	}()
	c.Run(old.Index, tol+5*c.Tick(old.Index))
	if got := old.Status().LastIndex; got != before {
		t.Fatalf("the cut-off leader appended %d entries", got-before)
	}
	if err := <-hb; err == nil {
		t.Fatal("a leader cut off from its quorum acknowledged a heartbeat")
	}
	c.WaitFor(10*time.Second, "the cut-off leader to step down and drop its timers", func() bool {
		st := old.Status()
		return st.State != "Leader" && !st.Ready && st.WorkersTimed == 0
	})
	if liveToken(old, "a") != g.Lease.Token {
		t.Fatal("the cut-off leader committed an expiry")
	}
	leader := leaderAmong(c, others)
	if liveToken(leader, "a") != g.Lease.Token {
		t.Fatal("the lease did not survive the partition")
	}
	c.Heal()
	c.Converged()
	if n := countEvents(leader, fsm.EventLeaseExpired); n != 0 {
		t.Fatalf("%d expiries committed, want 0", n)
	}
	_, err := old.Apply(ctx(t), &fsm.RegisterWorker{WorkerID: "x", Capacity: 1})
	if !errors.Is(err, cluster.ErrNotLeader) {
		t.Fatalf("deposed leader's apply: %v", err)
	}
}

// drainAudits waits until every audit record queued on n before the call
// is recorded: n records them one at a time, in order, so it waits for
// one of its own queued behind them.
func drainAudits(t *testing.T, c *clustertest.Cluster, n *clustertest.Node) {
	t.Helper()
	marker := fmt.Sprint(time.Now().UnixNano())
	n.AuditAsync(fsm.Audit{Action: "test.drain", Actor: "test", Detail: marker})
	c.WaitFor(10*time.Second, "the audit queue drained", func() bool { return len(auditEvents(n, "test.drain: "+marker)) == 1 })
}

// runWithWitness advances the leader's clock by total in ticks, with a
// witness worker heartbeating at each: not every worker is silent, so the
// guard against mass expiry stays out of the way.
func runWithWitness(t *testing.T, c *clustertest.Cluster, leader *clustertest.Node, total time.Duration) {
	t.Helper()
	tick := c.Tick(leader.Index)
	for d := time.Duration(0); d < total; d += tick {
		heartbeat(t, leader, "witness")
		c.Step(leader.Index, tick)
	}
}

// Thousands of leases due together end in the first tick past their
// deadline, in as many commands as it takes: no rate limit spreads them
// over seconds.
func TestMassExpiryInOneTick(t *testing.T) {
	const workers, per = 2, 2500 // more than one Expire command holds
	// Slow timings: the leases are timed on the leader's clock, so the
	// leader must stay the leader through thousands of writes (under -race
	// on two busy cores, 200 ms Raft timings lost it part way).
	c := clustertest.New(t, 3, clustertest.SlowRaft())
	leader := c.Leader()
	tol := c.Config(leader.Index).Toleration
	do(t, c, &fsm.RegisterWorker{WorkerID: "witness", Capacity: 1})
	for w := range workers {
		id := fmt.Sprintf("w%d", w)
		do(t, c, &fsm.RegisterWorker{WorkerID: id, Capacity: per})
		for i := 0; i < per; i += fsm.MaxAcquireBatch {
			for k := i; k < min(i+fsm.MaxAcquireBatch, per); k++ {
				do(t, c, &fsm.SubmitJob{Spec: spec(fmt.Sprintf("%s-j%d", id, k), fsm.LostRequeue)})
			}
			res, err := leader.Acquire(ctx(t), fsm.Acquire{WorkerID: id, RequestID: fmt.Sprint("r", i), Queues: []string{"default"},
				Max: uint32(min(fsm.MaxAcquireBatch, per-i))}, time.Second)
			if err != nil || len(res.Grants) != min(fsm.MaxAcquireBatch, per-i) {
				t.Fatalf("acquire by %s: %d grants, %v", id, len(res.Grants), err)
			}
		}
	}
	runWithWitness(t, c, leader, tol)
	if n := countEvents(leader, fsm.EventLeaseExpired); n != 0 {
		t.Fatalf("%d leases expired before their deadline", n)
	}
	runWithWitness(t, c, leader, 2*c.Tick(leader.Index))
	c.WaitFor(10*time.Second, "every lease expired", func() bool { return leader.FSM().Stats().LiveLeases == 0 })
}

// When every worker falls silent at once, the leader holds their expiries
// (it may be the one cut off) and says so; the first worker heard again
// lifts the hold, and the others are charged only from then: their leases
// expire a toleration later, while the one that spoke keeps its own.
func TestCutOffGuardHoldsExpiries(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.Leader()
	grants := map[string]fsm.Grant{}
	for i := range 3 {
		w := fmt.Sprintf("w%d", i)
		do(t, c, &fsm.RegisterWorker{WorkerID: w, Capacity: 1})
		do(t, c, &fsm.SubmitJob{Spec: spec(fmt.Sprintf("j%d", i), fsm.LostRequeue)})
		grants[w] = acquire(t, leader, w, "r")
	}
	held := func() int {
		n := 0
		for _, ev := range leader.FSM().Events(0, fsm.MaxPageSize).Events {
			if ev.Type == fsm.EventAbsenceRule && strings.Contains(ev.Detail, "expiries held") {
				n++
			}
		}
		return n
	}
	c.Run(leader.Index, 3*clustertest.Toleration)
	if n := countEvents(leader, fsm.EventLeaseExpired); n != 0 {
		t.Fatalf("%d leases expired while every worker was silent", n)
	}
	c.WaitFor(5*time.Second, "the hold recorded", func() bool { return held() == 1 })
	heartbeat(t, leader, "w0", grants["w0"])
	c.Step(leader.Index, c.Tick(leader.Index))
	if n := countEvents(leader, fsm.EventLeaseExpired); n != 0 {
		t.Fatalf("%d leases expired the moment the hold lifted", n)
	}
	for d := time.Duration(0); d < clustertest.Toleration+2*c.Tick(leader.Index); d += c.Tick(leader.Index) {
		heartbeat(t, leader, "w0", grants["w0"])
		c.Step(leader.Index, c.Tick(leader.Index))
	}
	c.WaitFor(5*time.Second, "the silent workers' leases expired", func() bool { return countEvents(leader, fsm.EventLeaseExpired) == 2 })
	if liveToken(leader, "j0") != grants["w0"].Lease.Token {
		t.Fatal("the worker that spoke lost its lease")
	}
}

// The timer loop wakes for a worker's deadline, not only every interval: a
// silent worker's lease expires in a pass at most cluster.ExpiryResolution
// after its deadline (toleration past its last hearing, and a nanosecond,
// as silence must exceed it), and never before. Passes only every interval
// made the expiry wait for the next one, up to half a renew late. The test
// moves the clock from one armed timer to the next, so every pass runs at
// the time its timer asked for.
func TestExpiryPassAtTheDeadline(t *testing.T) {
	c := clustertest.New(t, 1)
	leader := c.Leader()
	clk := leader.Clock
	cfg := c.Config(leader.Index)
	do(t, c, &fsm.RegisterWorker{WorkerID: "w1", Capacity: 1})
	do(t, c, &fsm.SubmitJob{Spec: spec("j1", fsm.LostRequeue)})
	heardAt := clk.Now() // the clock moves only when the test moves it
	res, err := leader.Acquire(ctx(t), fsm.Acquire{WorkerID: "w1", RequestID: "r1", Queues: []string{"default"}, Max: 1}, time.Second)
	if err != nil || len(res.Grants) != 1 {
		t.Fatalf("acquire: %d grants, %v", len(res.Grants), err)
	}
	due := heardAt.Add(cfg.Toleration + time.Nanosecond)
	late := due.Add(cluster.ExpiryResolution)
	if err := clk.BlockUntil(ctx(t), 1); err != nil {
		t.Fatalf("the timer loop armed no timer: %v", err)
	}
	for {
		live := leader.FSM().Stats().LiveLeases
		now := clk.Now()
		switch {
		case live == 0 && !now.Before(due) && !now.After(late):
			return
		case live == 0:
			t.Fatalf("the lease expired at %v, its deadline is %v", now.Sub(heardAt), due.Sub(heardAt))
		case !now.Before(late):
			t.Fatalf("no pass within %v of the deadline (%v after the last hearing): the lease is still live at %v",
				cluster.ExpiryResolution, due.Sub(heardAt), now.Sub(heardAt))
		}
		pending := clk.Deadlines()
		if len(pending) == 0 {
			t.Fatal("the timer loop armed no timer")
		}
		c.Step(leader.Index, pending[0].Sub(now))
	}
}
