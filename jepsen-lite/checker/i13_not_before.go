package checker

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/leasehold/leasehold/jepsen-lite/history"
)

// checkNotBefore (I13): no grant before its time, and every retryable job
// either succeeds or ends after its attempts.
//
// Every time compared is a leader time the state machine stamped (a
// lease's granted_at and ended_at, a job's not_before), never a runner's
// clock, so clock faults cannot excuse or fake a violation. A grant is
// judged against a lower bound of the not_before in force when it was
// made; the true one is never lower, because a job's not_before only grows
// (a retry sets it to the report's time plus a delay, and the report comes
// after the grant, which came after the previous not_before):
//
//   - an acquire's answer carries both the lease's granted_at and the job's
//     not_before as that grant saw them (replayed answers are left out:
//     they carry the job as it is now);
//   - along a job's leases in a final state, oldest first, the bound
//     starts at the not_before its creating submit was answered with (for
//     the job's first lease, when the state keeps all its leases) and
//     rises, after each lease that ended in a retryable failure, to that
//     report's ended_at plus the smallest delay it could have chosen: the
//     report's own retry_after (a snooze) when the history holds the
//     holder's report, else the policy's first delay less its whole jitter
//     (later delays only grow: the multiplier is at least 1, the cap at
//     least the first delay). A report the history does not hold (a shell
//     worker's) is bounded by the delay its job.retry_scheduled event
//     states, or, with no such event, not at all (counted).
//
// A job whose last lease ended in a retryable failure that was not
// revoked must have run out of attempts: at least max_attempts failed
// leases: it ends dead (from cluster level 6) or, below, reported with
// outcome failed. And no lease follows the max_attempts-th failure (the
// workload never retries a dead job).
func checkNotBefore(v *view, r *Result) {
	checked, delayed, unbounded, retryJobs, outOfAttempts := 0, 0, 0, 0, 0
	minMargin := int64(math.MaxInt64)
	retryDelays := v.retryScheduled()
	judge := func(job string, tok uint64, granted, bound int64, why string, entries ...int) {
		checked++
		if bound <= 0 || granted <= 0 {
			return
		}
		delayed++
		minMargin = min(minMargin, granted-bound)
		if granted < bound {
			r.add(fmt.Sprintf("job %s: token %d granted at leader time %s, %s before its not_before %s (%s)",
				job, tok, leaderTime(granted), time.Duration(bound-granted), leaderTime(bound), why), job, tok, entries...)
		}
	}
	for _, job := range v.jobs {
		for _, g := range v.grants[job] {
			if !g.replayed {
				judge(job, g.g.Token, g.g.GrantedAtNs, g.g.NotBeforeNs, "as the grant's own answer carried it", v.ops[g.op].CompleteIndex)
			}
		}
		f, j := v.finalJob(job)
		if j == nil || len(j.Leases) == 0 {
			continue
		}
		whole := len(j.Tokens) < v.opts.LeaseHistory
		reports := v.retryReports(job)
		var bound int64
		why := ""
		if sub, idx := v.createdNotBefore(job); whole && sub > 0 {
			bound, why = sub, fmt.Sprintf("the run-at time its submit was answered with, entry %d", idx)
		}
		failures := uint32(0)
		retried := false
		for i := range j.Leases {
			l := &j.Leases[i]
			if i > 0 {
				p := &j.Leases[i-1]
				if whole && j.MaxAttempts > 0 && failures >= j.MaxAttempts {
					r.add(fmt.Sprintf("job %s: token %d granted after %d failures of at most %d attempts", job, l.Token, failures, j.MaxAttempts),
						job, l.Token, f.idx)
				}
				if retryableFailure(p) {
					d, src, ok := v.smallestDelay(j, p, reports, retryDelays)
					if !ok {
						unbounded++
					}
					if b := p.EndedAtNs + d; p.EndedAtNs > 0 && b > bound {
						bound, why = b, fmt.Sprintf("token %d failed retryably at %s, then %s of delay at least (%s)", p.Token, leaderTime(p.EndedAtNs), time.Duration(d), src)
					}
				}
			}
			judge(job, l.Token, l.GrantedAtNs, bound, why, f.idx)
			if l.State == history.LeaseReported && l.Outcome == history.OutcomeFailed {
				failures++
				retried = retried || l.Retryable
			}
		}
		if !retried {
			continue
		}
		retryJobs++
		last := &j.Leases[len(j.Leases)-1]
		if j.State != history.JobReported && j.State != history.JobDead || !retryableFailure(last) || last.Revoke != "" {
			continue
		}
		outOfAttempts++
		if whole && j.MaxAttempts > 0 && failures < j.MaxAttempts {
			r.add(fmt.Sprintf("job %s: ended %s after a retryable failure (token %d) with %d of %d attempts used",
				job, j.State, last.Token, failures, j.MaxAttempts), job, last.Token, f.idx)
		}
	}
	r.Stats["grants_checked"] = float64(checked)
	r.Stats["grants_delayed"] = float64(delayed)
	r.Stats["retries_unbounded"] = float64(unbounded)
	r.Stats["retryable_jobs"] = float64(retryJobs)
	r.Stats["retryable_jobs_out_of_attempts"] = float64(outOfAttempts)
	if minMargin != math.MaxInt64 {
		r.Stats["min_margin_ms"] = ms(minMargin)
	}
	if len(v.finals) == 0 {
		r.note("no final states: only the acquires' answers judged")
	}
}

// retryableFailure: the lease ended with a report of a retryable failure.
func retryableFailure(l *history.Lease) bool {
	return l.State == history.LeaseReported && l.Outcome == history.OutcomeFailed && l.Retryable
}

// finalJob is the job as the first final state listing it with its leases
// holds it (every node's agree, or I8 says so).
func (v *view) finalJob(job string) (final, *history.JobSummary) {
	for _, f := range v.finals {
		if j, ok := f.jobs[job]; ok && len(j.Leases) == len(j.Tokens) {
			return f, j
		}
	}
	return final{}, nil
}

// createdNotBefore is the not_before of the submit answered created, and
// that answer's entry; 0 when none was.
func (v *view) createdNotBefore(job string) (int64, int) {
	for _, i := range v.jobOps[job] {
		op := &v.ops[i]
		if op.Name == history.OpSubmit && op.Status == history.StatusOK && op.Output.Created && op.Output.Job != nil {
			return op.Output.Job.NotBeforeNs, op.CompleteIndex
		}
	}
	return 0, -1
}

// retryReports are the recorded reports of a retryable failure per token,
// whatever their answer: each is one the worker sent.
func (v *view) retryReports(job string) map[uint64][]*history.Input {
	out := map[uint64][]*history.Input{}
	for _, i := range v.jobOps[job] {
		op := &v.ops[i]
		if op.Name == history.OpReport && op.Input.Outcome == history.OutcomeFailed && op.Input.Retryable {
			out[op.Input.Token] = append(out[op.Input.Token], &op.Input)
		}
	}
	return out
}

// smallestDelay is the smallest delay the retryable failure that ended
// lease l could have set: the smallest any of its holder's recorded
// reports of it asks for (a snooze's own, else the policy's least), else
// the one its job.retry_scheduled event states. ok is false when neither
// is known (the delay is taken as zero).
func (v *view) smallestDelay(j *history.JobSummary, l *history.Lease, reports map[uint64][]*history.Input, events map[leaseKey]int64) (int64, string, bool) {
	d, src := int64(math.MaxInt64), ""
	for _, in := range reports[l.Token] {
		if in.WorkerID != l.WorkerID {
			continue // not the holder: its report did not end the lease
		}
		if in.RetryAfterNs > 0 && in.RetryAfterNs < d {
			d, src = in.RetryAfterNs, "the report's snooze"
		}
		if p := policyLeast(j.Retry); in.RetryAfterNs == 0 && p < d {
			d, src = p, "the retry policy's least"
		}
	}
	if src != "" {
		return d, src, true
	}
	if d, ok := events[leaseKey{j.ID, l.Token}]; ok {
		return d, "its job.retry_scheduled event", true
	}
	return 0, "unknown: report not recorded", false
}

// policyLeast is the smallest delay a policy ever sets: its first delay
// less the whole jitter (the state machine takes off at most jitter% of
// it, rounding the cut down). No policy retries at once.
func policyLeast(p *history.RetryPolicy) int64 {
	if p == nil || p.InitialNs <= 0 {
		return 0
	}
	jitter := int64(math.Round(p.Jitter * 100))
	return p.InitialNs / 100 * (100 - min(max(jitter, 0), 100))
}

// retryScheduled reads the delay each job.retry_scheduled event states
// ("retry in 1.6s, not before ..."), per lease.
func (v *view) retryScheduled() map[leaseKey]int64 {
	out := map[leaseKey]int64{}
	for _, e := range v.events {
		if e.ev.Type != history.EventRetryScheduled {
			continue
		}
		rest, ok := strings.CutPrefix(e.ev.Detail, "retryable failure; retry in ")
		if !ok {
			continue
		}
		s, _, _ := strings.Cut(rest, ",")
		if d, err := time.ParseDuration(s); err == nil {
			out[leaseKey{e.ev.JobID, e.ev.Token}] = int64(d)
		}
	}
	return out
}

func leaderTime(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000000000") }
