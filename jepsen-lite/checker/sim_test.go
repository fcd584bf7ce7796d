package checker

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// simCluster is a correct cluster in miniature: one sequential job table
// whose every change happens at a linearization point, with calls around
// the points overlapping each other. Histories it produces must pass every
// checker, however the calls interleave: a checker that flags one has a
// false positive.
type simCluster struct {
	b    *hb
	rnd  *rand.Rand
	now  int64 // the last linearization point, ms
	last uint64
	ids  []string
}

// point returns the next linearization point and a call around it.
func (c *simCluster) point() (inv, lin, comp int64) {
	c.now += 2
	lin = c.now
	return lin - c.rnd.Int64N(9), lin, lin + c.rnd.Int64N(9)
}

func (c *simCluster) live() []*history.JobSummary {
	var out []*history.JobSummary
	for _, id := range c.ids {
		if j := c.b.jobs[id]; j.CurrentToken != 0 {
			out = append(out, j)
		}
	}
	return out
}

func (c *simCluster) pick(js []*history.JobSummary) *history.JobSummary {
	if len(js) == 0 {
		return nil
	}
	return js[c.rnd.IntN(len(js))]
}

func (c *simCluster) holder(j *history.JobSummary) string {
	return j.Leases[len(j.Leases)-1].WorkerID
}

func (c *simCluster) step() {
	b := c.b
	switch r := c.rnd.IntN(100); {
	case r < 20: // acquire the oldest queued job
		inv, lin, comp := c.point()
		w := fmt.Sprintf("w%d", 1+c.rnd.IntN(4))
		for _, id := range c.ids {
			if b.jobs[id].State == history.JobQueued {
				c.last++
				if c.rnd.IntN(10) == 0 { // the answer is lost: unseen grant
					j := b.job(id)
					j.Tokens = append(j.Tokens, c.last)
					j.Leases = append(j.Leases, history.Lease{Token: c.last, WorkerID: w, State: history.LeaseActive, Started: true})
					j.State, j.CurrentToken, b.last = history.JobRunning, c.last, c.last
					b.call(w, history.OpAcquire, history.Input{WorkerID: w}, inv, comp, history.StatusInfo, "TIMEOUT", nil)
					b.event(lin+1, history.ClusterEvent{Type: history.EventLeaseAcquired, JobID: id, Token: c.last, WorkerID: w})
					return
				}
				b.acquire(w, id, c.last, inv, comp)
				return
			}
		}
	case r < 30: // the holder reports a retryable failure
		j := c.pick(c.live())
		if j == nil {
			return
		}
		inv, _, comp := c.point()
		l := b.lease(j.ID, j.CurrentToken)
		j.Attempts++
		answer := history.JobQueued
		if l.Revoke != "" || j.Attempts >= 3 {
			answer = history.JobReported
		}
		rid := fmt.Sprintf("f%d", l.Token)
		l.State, l.ReportID, l.Outcome, l.Retryable = history.LeaseReported, rid, history.OutcomeFailed, true
		b.call(l.WorkerID, history.OpReport, history.Input{JobID: j.ID, Token: l.Token, ReportID: rid, Outcome: history.OutcomeFailed,
			Retryable: true}, inv, comp, history.StatusOK, "", &history.Output{Outcome: history.OutcomeFailed, State: answer, Requeued: answer == history.JobQueued})
		b.event(comp+1, history.ClusterEvent{Type: history.EventLeaseReported, JobID: j.ID, Token: l.Token})
		j.State, j.CurrentToken, j.Outcome = answer, 0, history.OutcomeFailed
	case r < 33: // a client cancels a job
		j := b.jobs[c.ids[c.rnd.IntN(len(c.ids))]]
		inv, _, comp := c.point()
		in := history.Input{JobID: j.ID}
		switch {
		case j.State == history.JobQueued || j.State == history.JobCancelled:
			j.State = history.JobCancelled
			b.call("c1", history.OpCancel, in, inv, comp, history.StatusOK, "", &history.Output{State: j.State})
		case j.State.Leased():
			b.lease(j.ID, j.CurrentToken).Revoke = history.RevokeCancel
			b.call("c1", history.OpCancel, in, inv, comp, history.StatusOK, "", &history.Output{State: j.State, Revoked: true})
		default:
			b.call("c1", history.OpCancel, in, inv, comp, history.StatusFail, "JOB_FINISHED", nil)
		}
	case r < 38: // the holder reports success
		j := c.pick(c.live())
		if j == nil {
			return
		}
		inv, _, comp := c.point()
		rid := fmt.Sprintf("r%d", j.CurrentToken)
		if c.rnd.IntN(8) == 0 { // answer lost, report landed
			l := b.lease(j.ID, j.CurrentToken)
			l.State, l.ReportID, l.Outcome = history.LeaseReported, rid, history.OutcomeSucceeded
			b.call(c.holder(j), history.OpReport, history.Input{JobID: j.ID, Token: j.CurrentToken, ReportID: rid,
				Outcome: history.OutcomeSucceeded}, inv, comp, history.StatusInfo, "OUTCOME_UNKNOWN", nil)
			b.event(comp, history.ClusterEvent{Type: history.EventLeaseReported, JobID: j.ID, Token: j.CurrentToken})
			j.State, j.CurrentToken, j.Outcome = history.JobReported, 0, history.OutcomeSucceeded
			return
		}
		b.report(c.holder(j), j.ID, j.CurrentToken, rid, inv, comp)
	case r < 45: // the leader expires a lease, unseen by any client
		j := c.pick(c.live())
		if j == nil {
			return
		}
		_, lin, _ := c.point()
		b.expire(j.ID, j.CurrentToken, lin+c.rnd.Int64N(5))
	case r < 50: // the holder releases
		j := c.pick(c.live())
		if j == nil {
			return
		}
		inv, _, comp := c.point()
		b.release(c.holder(j), j.ID, j.CurrentToken, inv, comp)
	case r < 60: // a late report on an ended lease is refused and recorded
		var ended []history.LeaseRef
		for _, id := range c.ids {
			for _, l := range b.jobs[id].Leases {
				if l.State == history.LeaseExpired || l.State == history.LeaseReleased {
					ended = append(ended, ref(id, l.Token))
				}
			}
		}
		if len(ended) == 0 {
			return
		}
		l := ended[c.rnd.IntN(len(ended))]
		inv, _, comp := c.point()
		b.refusedReport("late", l.JobID, l.Token, fmt.Sprintf("late%d", l.Token), "STALE_TOKEN", inv, comp)
		b.sink(history.SinkFenced, "late", l.JobID, l.Token, comp+1, false)
	case r < 85: // a fence check, or a fenced write by the holder
		id := c.ids[c.rnd.IntN(len(c.ids))]
		j := b.jobs[id]
		tok := j.CurrentToken
		if tok == 0 && len(j.Tokens) > 0 {
			tok = j.Tokens[c.rnd.IntN(len(j.Tokens))]
		}
		inv, lin, comp := c.point()
		if tok != 0 && tok == j.CurrentToken && c.rnd.IntN(2) == 0 {
			b.raw(history.Entry{Kind: history.KindSinkWrite, Ns: at(comp), Process: c.holder(j), Sink: &history.SinkWrite{
				Sink: history.SinkFenced, JobID: id, Token: tok, Accepted: true, CheckNs: at(inv)}})
			_ = lin
			return
		}
		b.fence(id, tok, inv, comp, j.CurrentToken, j.State)
	default: // a linearizable read of a job
		id := c.ids[c.rnd.IntN(len(c.ids))]
		inv, _, comp := c.point()
		seen := *b.jobs[id]
		seen.Tokens = append([]uint64(nil), seen.Tokens...)
		seen.Leases = append([]history.Lease(nil), seen.Leases...)
		b.getJob(id, inv, comp, seen)
	}
}

func simulate(t testing.TB, seed uint64, jobs, steps int) []history.Entry {
	// Calls begin after every submit has been answered.
	c := &simCluster{b: newHB(t), rnd: rand.New(rand.NewPCG(seed, 7)), now: int64(jobs) + 20}
	for i := range jobs {
		id := fmt.Sprintf("job%03d", i)
		c.ids = append(c.ids, id)
		c.b.submit(id, int64(1+i), int64(2+i))
	}
	for range steps {
		c.step()
	}
	c.now += 100
	return c.b.finish(c.now, true)
}

func TestSimulatedCorrectClusterPasses(t *testing.T) {
	for seed := range uint64(50) {
		entries := simulate(t, seed, 8, 500)
		rep := Check(entries, Options{})
		if !rep.OK() {
			t.Logf("seed %d", seed)
			expectOnly(t, rep)
		}
	}
}

// A long history must stay cheap to check: thousands of calls over many
// jobs in well under the suite's budget.
func TestSimulatedHistoryScales(t *testing.T) {
	if testing.Short() {
		t.Skip("long history")
	}
	entries := simulate(t, 99, 200, 20000)
	start := time.Now()
	rep := Check(entries, Options{})
	took := time.Since(start)
	expectOnly(t, rep)
	if res, _ := rep.Result("I10"); res.Stats["jobs_timed_out"] != 0 {
		t.Fatalf("Porcupine timed out: %v", res.Stats)
	}
	t.Logf("%d entries checked in %v", len(entries), took)
}

// failsAmong checks that each invariant named found violations.
func failsAmong(t *testing.T, rep Report, invariants ...string) {
	t.Helper()
	for _, inv := range invariants {
		if res, _ := rep.Result(inv); res.OK() {
			var sb strings.Builder
			_ = rep.Summary(&sb)
			t.Fatalf("%s found nothing:\n%s", inv, sb.String())
		}
	}
}

// Bugs injected into random histories are caught, wherever they land.
func TestSimulatedBugsAreCaught(t *testing.T) {
	for seed := range uint64(10) {
		// A report on an expired lease, acknowledged.
		c := &simCluster{b: newHB(t), rnd: rand.New(rand.NewPCG(seed, 7)), now: 30}
		for i := range 6 {
			id := fmt.Sprintf("job%03d", i)
			c.ids = append(c.ids, id)
			c.b.submit(id, int64(1+i), int64(2+i))
		}
		for range 300 {
			c.step()
		}
		var expired []history.LeaseRef
		for _, id := range c.ids {
			for _, l := range c.b.jobs[id].Leases {
				if l.State == history.LeaseExpired {
					expired = append(expired, ref(id, l.Token))
				}
			}
		}
		if len(expired) == 0 {
			continue
		}
		l := expired[c.rnd.IntN(len(expired))]
		c.now += 50
		c.b.call("late", history.OpReport, history.Input{JobID: l.JobID, Token: l.Token, ReportID: "zombie", Outcome: history.OutcomeSucceeded},
			c.now, c.now+1, history.StatusOK, "", &history.Output{Outcome: history.OutcomeSucceeded, State: history.JobReported})
		failsAmong(t, Check(c.b.finish(c.now+10, true), Options{}), "I5", "I7", "I10")
	}
	for seed := range uint64(10) {
		// A fence check answering an old token current after a newer grant.
		entries := simulate(t, seed, 6, 300)
		v, err := newView(entries, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, job := range v.jobs {
			gs := v.grants[job]
			if len(gs) < 2 {
				continue
			}
			old, cur := gs[0], gs[len(gs)-1]
			after := (cur.complete-origin)/1e6 + 1
			b := &hb{t: t, e: entries, ids: map[string]uint64{"c1": 1 << 20}}
			b.fence(job, old.g.Token, after, after+1, old.g.Token, history.JobRunning)
			failsAmong(t, Check(b.e, Options{}), "I2", "I10")
			break
		}
	}
}
