package checker

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// Leader times in the I13 tests: milliseconds from an origin of the
// leader's wall clock, which has nothing to do with the history's clock.
func lt(msec int64) int64 { return 1_800_000_000_000_000_000 + msec*1_000_000 }

// defaultPolicy is the server's default: 1 s, doubling, at most 10 min,
// jitter 0.2; its least delay is 800 ms.
var defaultPolicy = &history.RetryPolicy{InitialNs: 1e9, MaxNs: 600e9, Multiplier: 2, Jitter: 0.2}

// submitAt: a job of the default policy and 3 attempts, created with
// not_before nb (0: none).
func (b *hb) submitAt(job string, inv, comp, nb int64) {
	j := b.job(job)
	j.MaxAttempts, j.Retry, j.NotBeforeNs = 3, defaultPolicy, nb
	b.call("c1", history.OpSubmit, history.Input{JobID: job}, inv, comp, history.StatusOK, "",
		&history.Output{Created: true, State: history.JobQueued,
			Job: &history.JobSummary{ID: job, State: history.JobQueued, Tokens: []uint64{}, NotBeforeNs: nb, MaxAttempts: 3, Retry: defaultPolicy}})
}

// grantAt: like acquire, the lease granted at leader time granted, the
// answer carrying the job's not_before nb.
func (b *hb) grantAt(worker, job string, tok uint64, inv, comp, granted, nb int64) {
	b.acquire(worker, job, tok, inv, comp)
	b.lease(job, tok).GrantedAtNs = granted
	for i := len(b.e) - 1; i >= 0; i-- {
		if e := b.e[i]; e.Kind == history.KindComplete && e.Op.Name == history.OpAcquire {
			e.Op.Output.Grants[0].GrantedAtNs, e.Op.Output.Grants[0].NotBeforeNs = granted, nb
			return
		}
	}
}

// failAt: worker reports tok a retryable failure (snoozing snooze ms, 0:
// the policy's delay), ended at leader time ended; the job waits until nb
// (0: out of attempts, it ends reported).
func (b *hb) failAt(worker, job string, tok uint64, rid string, inv, comp, ended, snooze, nb int64) {
	l := b.lease(job, tok)
	l.State, l.ReportID, l.Outcome, l.Retryable, l.EndedAtNs = history.LeaseReported, rid, history.OutcomeFailed, true, ended
	j := b.job(job)
	j.CurrentToken, j.Outcome = 0, history.OutcomeFailed
	j.Attempts++
	out := &history.Output{Outcome: history.OutcomeFailed, State: history.JobReported}
	if nb > 0 {
		j.State, j.NotBeforeNs = history.JobQueued, nb
		out.State, out.Requeued = history.JobQueued, true
	} else {
		j.State = history.JobReported
	}
	b.call(worker, history.OpReport, history.Input{WorkerID: worker, JobID: job, Token: tok, ReportID: rid,
		Outcome: history.OutcomeFailed, Retryable: true, Ref: "ref-" + rid, RetryAfterNs: snooze * 1e6}, inv, comp, history.StatusOK, "", out)
	b.event(comp+1, history.ClusterEvent{Type: history.EventLeaseReported, JobID: job, Token: tok, WorkerID: worker,
		Ref: "ref-" + rid, Detail: "OUTCOME_FAILED"})
}

// i13Knobs move the leader times of the clean scenario.
type i13Knobs struct {
	j5Grant  int64 // j5 (run-at 1000) granted
	j6Grant2 int64 // j6's second lease (after a policy retry at 100, not before 1000)
	j6Grant3 int64 // j6's third lease (after a snooze of 200 at 1100, not before 1300)
	j6LastNB int64 // j6's third failure: 0 ends it (out of attempts)
}

var i13Defaults = i13Knobs{j5Grant: 1005, j6Grant2: 1010, j6Grant3: 1305}

// i13Scenario adds to the clean scenario a job submitted to run later
// (j5) and a job that fails retryably three times (j6): after the
// policy's backoff, after a snooze, and then out of attempts.
func i13Scenario(t *testing.T, k i13Knobs) *hb {
	b := scenario(t, defaults)
	b.submitAt("j5", 3600, 3602, lt(1000))
	b.grantAt("w1", "j5", 8, 3610, 3612, lt(k.j5Grant), lt(1000))
	b.report("w1", "j5", 8, "r8", 3620, 3622)

	b.submitAt("j6", 3630, 3632, 0)
	b.grantAt("w1", "j6", 9, 3640, 3642, lt(10), 0)
	b.failAt("w1", "j6", 9, "r9", 3650, 3652, lt(100), 0, lt(1000))
	b.grantAt("w1", "j6", 10, 3660, 3662, lt(k.j6Grant2), lt(1000))
	b.failAt("w1", "j6", 10, "r10", 3670, 3672, lt(1100), 200, lt(1300))
	b.grantAt("w1", "j6", 11, 3680, 3682, lt(k.j6Grant3), lt(1300))
	b.failAt("w1", "j6", 11, "r11", 3690, 3692, lt(1400), 0, k.j6LastNB)
	return b
}

// i13Caught checks that I13 alone finds n violations, which say every
// one of wants.
func i13Caught(t *testing.T, b *hb, n int, wants ...string) {
	t.Helper()
	rep := Check(b.finish(5000, true), Options{})
	expectOnly(t, rep, "I13")
	res := resultOf(t, rep, "I13")
	if len(res.Violations) != n {
		t.Fatalf("I13 found %d violations, want %d: %+v", len(res.Violations), n, res.Violations)
	}
	var msgs []string
	for _, v := range res.Violations {
		msgs = append(msgs, v.Msg)
	}
	for _, w := range wants {
		if !strings.Contains(strings.Join(msgs, "\n"), w) {
			t.Errorf("no I13 violation says %q: %q", w, msgs)
		}
	}
}

func TestI13GrantsAtTheirTimePass(t *testing.T) {
	rep := Check(i13Scenario(t, i13Defaults).finish(5000, true), Options{RequireAllFinished: true})
	expectOnly(t, rep)
	res := resultOf(t, rep, "I13")
	if res.Stats["grants_delayed"] != 6 || res.Stats["retryable_jobs_out_of_attempts"] != 1 || res.Stats["min_margin_ms"] != 5 {
		t.Fatalf("I13 stats %v", res.Stats)
	}
}

// A job submitted to run at 1000 granted at 500: its grant's own answer
// shows it, and so does the final state against the submit's answer.
func TestI13GrantBeforeRunAt(t *testing.T) {
	k := i13Defaults
	k.j5Grant = 500
	i13Caught(t, i13Scenario(t, k), 2, "job j5: token 8 granted", "the run-at time its submit was answered with")
}

// A retry granted 1 ms after the failure (as chaos_nodelay does) is caught
// from the final state alone too: the policy's least delay is 800 ms,
// whatever not_before the grant's answer claims.
func TestI13RetryGrantedAtOnce(t *testing.T) {
	k := i13Defaults
	k.j6Grant2 = 101
	b := i13Scenario(t, k)
	for i := range b.e {
		if e := b.e[i]; e.Kind == history.KindComplete && e.Op.Name == history.OpAcquire && e.Op.Output.Grants[0].Token == 10 {
			e.Op.Output.Grants[0].NotBeforeNs = 0 // the answer says nothing
		}
	}
	i13Caught(t, b, 1, "token 10 granted at", "the retry policy's least")
}

// A snooze of 200 ms is shorter than the policy's least delay, and it is
// the bound: granted 150 ms after the failure is early.
func TestI13SnoozeCutShort(t *testing.T) {
	k := i13Defaults
	k.j6Grant3 = 1250
	i13Caught(t, i13Scenario(t, k), 2, "as the grant's own answer carried it", "the report's snooze")
}

// A retryable failure that ends the job before its attempts are used.
func TestI13EndedBeforeItsAttempts(t *testing.T) {
	b := i13Scenario(t, i13Defaults)
	b.job("j6").MaxAttempts = 4
	i13Caught(t, b, 1, "with 3 of 4 attempts used")
}

// From level 6 a job out of attempts ends dead: accepted as the end of a
// job that used its attempts, caught when it did not.
func TestI13DeadAfterItsAttempts(t *testing.T) {
	b := i13Scenario(t, i13Defaults)
	b.job("j6").State = history.JobDead
	rep := Check(b.finish(5000, true), Options{RequireAllFinished: true})
	expectOnly(t, rep)
	if res := resultOf(t, rep, "I13"); res.Stats["retryable_jobs_out_of_attempts"] != 1 {
		t.Fatalf("I13 stats %v: the dead job not judged", res.Stats)
	}
	b = i13Scenario(t, i13Defaults)
	b.job("j6").State, b.job("j6").MaxAttempts = history.JobDead, 4
	i13Caught(t, b, 1, "job j6: ended dead after a retryable failure (token 11) with 3 of 4 attempts used")
}

func TestPolicyLeast(t *testing.T) {
	for _, c := range []struct {
		p    *history.RetryPolicy
		want int64
	}{
		{nil, 0},
		{defaultPolicy, 800e6},
		{&history.RetryPolicy{InitialNs: 1e9, Jitter: 0}, 1e9},
		{&history.RetryPolicy{InitialNs: 1e9, Jitter: 1}, 0},
		{&history.RetryPolicy{InitialNs: 999, Jitter: 0.33}, 603}, // 9 × 67: rounded down
	} {
		if got := policyLeast(c.p); got != c.want {
			t.Errorf("policyLeast(%+v) = %d, want %d", c.p, got, c.want)
		}
	}
}

// unrecordedRetry adds j7: shell worker s1's retryable failure of token
// 12 at 2100 is not recorded (its job.retry_scheduled event says 200 ms);
// w2's refused report of the same token (no snooze: the policy's 800 ms)
// is; token 13 is granted at grant.
func unrecordedRetry(t *testing.T, grant int64) *hb {
	b := i13Scenario(t, i13Defaults)
	b.submitAt("j7", 3700, 3702, 0)
	b.grantAt("s1", "j7", 12, 3710, 3712, lt(2000), 0)
	l := b.lease("j7", 12)
	l.State, l.ReportID, l.Outcome, l.Retryable, l.EndedAtNs = history.LeaseReported, "rs", history.OutcomeFailed, true, lt(2100)
	b.job("j7").Attempts++
	b.event(3721, history.ClusterEvent{Type: history.EventLeaseReported, JobID: "j7", Token: 12, WorkerID: "s1", Detail: "OUTCOME_FAILED"})
	b.event(3722, history.ClusterEvent{Type: history.EventRetryScheduled, JobID: "j7", Token: 12,
		Detail: "retryable failure; retry in 200ms, not before 2026-12-02T06:00:00Z"})
	b.call("w2", history.OpReport, history.Input{WorkerID: "w2", JobID: "j7", Token: 12, ReportID: "rw2",
		Outcome: history.OutcomeFailed, Retryable: true}, 3730, 3732, history.StatusFail, "NOT_OWNER", nil)
	b.grantAt("s1", "j7", 13, 3740, 3742, lt(grant), 0)
	b.report("s1", "j7", 13, "r13", 3750, 3752)
	return b
}

// A retryable failure whose report the history does not hold (a shell
// worker's) is bounded by its job.retry_scheduled event, not by another
// worker's recorded report of the same token, which did not end it.
func TestI13UnrecordedReportBoundByEvent(t *testing.T) {
	rep := Check(unrecordedRetry(t, 2305).finish(5000, true), Options{})
	expectOnly(t, rep)
	if res := resultOf(t, rep, "I13"); res.Stats["retries_unbounded"] != 0 || res.Stats["min_margin_ms"] != 5 {
		t.Fatalf("I13 stats %v", res.Stats)
	}
	i13Caught(t, unrecordedRetry(t, 2250), 1, "token 13 granted", "its job.retry_scheduled event")
}
