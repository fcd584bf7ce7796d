package checker

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

// The sequential specification of one job, for Porcupine (I10).
//
// The state is what the clients can observe of a job: its state, its live
// token, the highest token it is known to have had, whether its lease is
// revoked, and the reports its leases took. Operations are the calls the
// runner recorded on that job. Everything that changes a job without a
// recorded call is an environment step the model may take between any two
// operations, nondeterministically:
//   - the live lease ends without a recorded call (the leader's expiry, a
//     deregistration): the job is queued again, or lost, or failed as a
//     poison job, or cancelled when the lease was revoked;
//   - a queued job is granted to an acquire whose answer the runner never
//     saw (an info acquire, which cannot be placed in any one job): the
//     new token is unknown, above every token seen so far, and is pinned
//     by the first operation that names it;
//   - a queued job is cancelled by a cancel_submitter whose answer was lost
//     (only when the history has one);
//   - a finished job is compacted away (only with AllowCompacted);
//   - the live lease of a job with a timeout times out (only for such a
//     job): the leader revokes it with a kill, and however it then ends
//     (its worker's report, a release, an expiry) the attempt is timed_out
//     and the job is queued again, or ends dead (or reported, below level
//     6) out of attempts.
//
// What stays forbidden is what matters: a token that goes back, a lease
// acting after a newer one was seen, a finished job leased again, two
// reports taken by one lease, a repeat answered differently, a read that
// disagrees with the writes before it.

// unknownToken marks a live lease granted out of sight.
const unknownToken = ^uint64(0)

type jobModelState struct {
	Phase   history.JobState // "" while the job does not exist
	Live    uint64           // the live lease; 0 none; unknownToken unseen
	Last    uint64           // the highest token the job is known to have had
	Revoked bool
	// TimedOut: the live lease was revoked past the job's timeout.
	TimedOut bool
	// Reports the job's leases took, one line each:
	// "token report_id outcome answer".
	Reports string
}

// linInput is one operation on one job.
type linInput struct {
	Op        string
	Token     uint64
	ReportID  string
	Outcome   history.Outcome
	Retryable bool
	Started   bool // acquire: the grant was started at once
	Replayed  bool // acquire
}

// linOutput is its answer.
type linOutput struct {
	Status       history.Status
	Reason       string
	State        history.JobState
	Outcome      history.Outcome
	Current      bool
	CurrentToken uint64
	Created      bool
	Revoked      bool
}

// jobModel builds the model of one job. exists: the job was there before
// its first recorded operation (no submit was recorded); timed: it has a
// timeout.
func jobModel(exists, envCancel, compaction, timed bool) porcupine.Model {
	init := jobModelState{}
	if exists {
		init.Phase = history.JobQueued
	}
	m := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{init} },
		Step: func(state, input, output interface{}) []interface{} {
			s := state.(jobModelState)
			in, out := input.(linInput), output.(linOutput)
			var next []interface{}
			for _, p := range environment(s, envCancel, compaction, timed) {
				for _, n := range apply(p, in, out) {
					next = append(next, n)
				}
			}
			return next
		},
		Equal: func(a, b interface{}) bool { return a.(jobModelState) == b.(jobModelState) },
		Hash: func(state interface{}) uint64 {
			s := state.(jobModelState)
			h := fnv.New64a()
			fmt.Fprintf(h, "%s|%d|%d|%v|%v|%s", s.Phase, s.Live, s.Last, s.Revoked, s.TimedOut, s.Reports)
			return h.Sum64()
		},
		DescribeOperation: describeLinOp,
		DescribeState:     describeJobState,
	}
	return m.ToModel()
}

// environment returns s and every state the unrecorded steps lead to.
func environment(s jobModelState, envCancel, compaction, timed bool) []jobModelState {
	out := []jobModelState{s}
	addEnd := func(from jobModelState) {
		e := from
		e.Live, e.Revoked, e.TimedOut = 0, false, false
		switch {
		case from.Revoked:
			e.Phase = history.JobCancelled
			out = append(out, e)
			return
		case from.TimedOut:
			// An expiry after a timeout: an attempt (a run-style job ends
			// lost all the same).
			for _, ph := range append(timedOutEnds(), history.JobLost) {
				e.Phase = ph
				out = append(out, e)
			}
			return
		}
		for _, ph := range []history.JobState{history.JobQueued, history.JobLost, history.JobFailed, history.JobDead} {
			e.Phase = ph
			out = append(out, e)
		}
	}
	if s.Live != 0 {
		addEnd(s)
	}
	if timed && s.Live != 0 && !s.Revoked && !s.TimedOut {
		t := s
		t.TimedOut = true
		out = append(out, t)
		addEnd(t)
	}
	// A queued job (now, or after its lease ended) may be granted unseen,
	// and that lease may end unseen too.
	queued := s
	queued.Phase, queued.Live, queued.Revoked, queued.TimedOut = history.JobQueued, 0, false, false
	if s.Phase == history.JobQueued || (s.Live != 0 && !s.Revoked && !s.TimedOut) {
		for _, ph := range []history.JobState{history.JobAcquired, history.JobRunning} {
			g := queued
			g.Phase, g.Live = ph, unknownToken
			out = append(out, g)
		}
		addEnd(queued)
		if envCancel {
			c := queued
			c.Phase = history.JobCancelled
			out = append(out, c)
		}
	}
	if compaction {
		for _, t := range out {
			if t.Phase.Terminal() {
				a := t
				a.Phase = ""
				out = append(out, a)
				break
			}
		}
	}
	return dedupe(out)
}

func dedupe(ss []jobModelState) []jobModelState {
	var out []jobModelState
	for _, s := range ss {
		dup := false
		for _, o := range out {
			if o == s {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out
}

// holding returns s with tok as its live lease, if tok can be live in s:
// it is, or the unseen grant can be it.
func holding(s jobModelState, tok uint64) (jobModelState, bool) {
	switch {
	case tok == 0:
		return s, false
	case s.Live == tok:
		return s, true
	case s.Live == unknownToken && tok > s.Last:
		s.Live, s.Last = tok, tok
		return s, true
	}
	return s, false
}

// apply returns the states one operation can lead to from s; none if it
// cannot happen in s.
func apply(s jobModelState, in linInput, out linOutput) []jobModelState {
	if out.Status == history.StatusInfo {
		// Maybe it never happened; maybe it did, with any answer.
		return append([]jobModelState{s}, applied(s, in)...)
	}
	switch in.Op {
	case history.OpSubmit:
		return applySubmit(s, out)
	case history.OpAcquire:
		return applyGrant(s, in)
	case history.OpStart:
		return applyLeaseWrite(s, in, out, func(h jobModelState) []jobModelState {
			h.Phase = history.JobRunning
			return []jobModelState{h}
		})
	case history.OpRelease:
		return applyLeaseWrite(s, in, out, func(h jobModelState) []jobModelState {
			var next []jobModelState
			for _, r := range releasedStates(h) {
				if out.State == "" || out.State == r.Phase {
					next = append(next, r)
				}
			}
			return next
		})
	case history.OpReport:
		return applyReport(s, in, out)
	case history.OpCancel, history.OpKill:
		return applyCancel(s, out)
	case history.OpFenceCheck, history.OpGetJob:
		return applyRead(s, in, out)
	}
	return []jobModelState{s}
}

// applied: the states an operation with an unknown outcome leaves if it
// did take effect, whatever its answer was.
func applied(s jobModelState, in linInput) []jobModelState {
	switch in.Op {
	case history.OpSubmit:
		if s.Phase == "" {
			s.Phase = history.JobQueued
			return []jobModelState{s}
		}
	case history.OpStart:
		if h, ok := holding(s, in.Token); ok {
			h.Phase = history.JobRunning
			return []jobModelState{h}
		}
	case history.OpRelease:
		if h, ok := holding(s, in.Token); ok {
			return releasedStates(h)
		}
	case history.OpReport:
		if _, ok := findReport(s, in.Token); ok {
			return nil
		}
		if h, ok := holding(s, in.Token); ok {
			outcome := in.Outcome
			if h.TimedOut {
				outcome = history.OutcomeTimedOut
			}
			var out []jobModelState
			for _, ans := range reportAnswers(h, in) {
				out = append(out, reported(h, in, outcome, ans))
			}
			return out
		}
	case history.OpCancel, history.OpKill:
		if n, _, ok := cancelled(s); ok {
			return []jobModelState{n}
		}
	}
	return nil
}

func applySubmit(s jobModelState, out linOutput) []jobModelState {
	switch {
	case out.Status == history.StatusOK && s.Phase == "":
		// Created may be false even so: the client retries a submit
		// whose first answer was lost, and the retry finds the job its
		// own first attempt made.
		s.Phase = history.JobQueued
		return []jobModelState{s}
	case out.Status == history.StatusOK && s.Phase != "" && !out.Created:
		return []jobModelState{s}
	case out.Status == history.StatusFail && out.Reason == transport.ReasonConflict && s.Phase == "":
		return nil
	case out.Status == history.StatusFail:
		return []jobModelState{s}
	}
	return nil
}

func applyGrant(s jobModelState, in linInput) []jobModelState {
	if in.Replayed {
		// A repeat of an earlier acquire: its token was granted before,
		// maybe out of sight.
		switch {
		case in.Token <= s.Last:
			return []jobModelState{s}
		case s.Live == unknownToken:
			h, _ := holding(s, in.Token)
			return []jobModelState{h}
		case s.Live == 0:
			s.Last = in.Token
			return []jobModelState{s}
		}
		return nil
	}
	if s.Phase != history.JobQueued || s.Live != 0 || in.Token <= s.Last {
		return nil
	}
	s.Live, s.Last, s.Revoked = in.Token, in.Token, false
	s.Phase = history.JobAcquired
	if in.Started {
		s.Phase = history.JobRunning
	}
	return []jobModelState{s}
}

// applyLeaseWrite handles start and release: ok needs the lease live; a
// STALE_TOKEN refusal needs it not live; other refusals are not modelled.
func applyLeaseWrite(s jobModelState, in linInput, out linOutput, then func(jobModelState) []jobModelState) []jobModelState {
	switch {
	case out.Status == history.StatusOK:
		if h, ok := holding(s, in.Token); ok {
			return then(h)
		}
		return nil
	case out.Reason == transport.ReasonStaleToken:
		if s.Live == in.Token {
			return nil
		}
		return []jobModelState{s}
	}
	return []jobModelState{s}
}

// releasedStates are the states a release of h's live lease leaves: the
// job queued again, cancelled when the lease was revoked, or, after a
// timeout, as a timed-out attempt ends.
func releasedStates(h jobModelState) []jobModelState {
	phases := []history.JobState{history.JobQueued}
	switch {
	case h.Revoked:
		phases = []history.JobState{history.JobCancelled}
	case h.TimedOut:
		phases = timedOutEnds()
	}
	h.Live, h.Revoked, h.TimedOut = 0, false, false
	out := make([]jobModelState, 0, len(phases))
	for _, ph := range phases {
		h.Phase = ph
		out = append(out, h)
	}
	return out
}

// timedOutEnds are the states a timed-out attempt leaves its job in: queued
// again by its retry policy, or out of attempts dead (reported below level
// 6).
func timedOutEnds() []history.JobState {
	return []history.JobState{history.JobQueued, history.JobDead, history.JobReported}
}

func applyReport(s jobModelState, in linInput, out linOutput) []jobModelState {
	rec, had := findReport(s, in.Token)
	switch {
	case out.Status == history.StatusOK && had:
		if rec.id == in.ReportID && (out.Outcome == "" || out.Outcome == rec.outcome) && (out.State == "" || out.State == rec.answer) {
			return []jobModelState{s}
		}
		return nil
	case out.Status == history.StatusOK:
		h, ok := holding(s, in.Token)
		if !ok {
			return nil
		}
		if h.TimedOut != (out.Outcome == history.OutcomeTimedOut) && out.Outcome != "" {
			return nil // the server says timed_out of a timed-out lease, and only of one
		}
		if !h.TimedOut && out.Outcome != "" && in.Outcome != "" && out.Outcome != in.Outcome {
			return nil
		}
		outcome := in.Outcome
		if h.TimedOut {
			outcome = history.OutcomeTimedOut
		}
		if outcome == "" {
			outcome = out.Outcome
		}
		var next []jobModelState
		for _, ans := range reportAnswers(h, in) {
			if out.State == "" || out.State == ans {
				next = append(next, reported(h, in, outcome, ans))
			}
		}
		return next
	case out.Reason == transport.ReasonStaleToken:
		if had || s.Live == in.Token {
			return nil
		}
		return []jobModelState{s}
	case out.Reason == transport.ReasonConflict:
		if had && rec.id != in.ReportID {
			return []jobModelState{s}
		}
		return nil
	}
	return []jobModelState{s}
}

// reportAnswers are the job states a report on h's live lease can leave:
// a retryable failure requeues unless attempts ran out (which the model
// does not count: then it ends reported, or dead from level 6) or the
// lease was revoked.
func reportAnswers(h jobModelState, in linInput) []history.JobState {
	if h.TimedOut {
		return timedOutEnds()
	}
	if in.Outcome == history.OutcomeFailed && in.Retryable && !h.Revoked {
		return []history.JobState{history.JobQueued, history.JobReported, history.JobDead}
	}
	return []history.JobState{history.JobReported}
}

func reported(h jobModelState, in linInput, outcome history.Outcome, answer history.JobState) jobModelState {
	h.Reports += fmt.Sprintf("%d %s %s %s\n", in.Token, in.ReportID, outcome, answer)
	h.Live, h.Revoked, h.TimedOut, h.Phase = 0, false, false, answer
	return h
}

type reportRec struct {
	id      string
	outcome history.Outcome
	answer  history.JobState
}

func findReport(s jobModelState, tok uint64) (reportRec, bool) {
	prefix := fmt.Sprintf("%d ", tok)
	for _, line := range strings.Split(s.Reports, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			f := strings.Split(rest, " ")
			if len(f) == 3 {
				return reportRec{f[0], history.Outcome(f[1]), history.JobState(f[2])}, true
			}
		}
	}
	return reportRec{}, false
}

// cancelled is the state after an acknowledged cancel, and whether it
// revoked a lease.
func cancelled(s jobModelState) (jobModelState, bool, bool) {
	switch {
	case s.Phase == history.JobQueued:
		s.Phase = history.JobCancelled
		return s, false, true
	case s.Phase.Leased():
		// A cancel turns a timed-out lease's revoke into a plain kill: the
		// job ends cancelled, not retried.
		s.Revoked, s.TimedOut = true, false
		return s, true, true
	case s.Phase == history.JobCancelled:
		return s, false, true
	}
	return s, false, false
}

func applyCancel(s jobModelState, out linOutput) []jobModelState {
	switch {
	case out.Status == history.StatusOK:
		n, revoked, ok := cancelled(s)
		if !ok || revoked != out.Revoked || (out.State != "" && out.State != n.Phase) {
			return nil
		}
		return []jobModelState{n}
	case out.Reason == transport.ReasonJobFinished:
		if s.Phase.Terminal() && s.Phase != history.JobCancelled {
			return []jobModelState{s}
		}
		return nil
	case out.Reason == transport.ReasonNotFound:
		if s.Phase == "" {
			return []jobModelState{s}
		}
		return nil
	}
	return []jobModelState{s}
}

// applyRead: a linearizable read shows the job's state and live token.
func applyRead(s jobModelState, in linInput, out linOutput) []jobModelState {
	if out.Status == history.StatusFail {
		if out.Reason == transport.ReasonNotFound && s.Phase != "" {
			return nil
		}
		return []jobModelState{s}
	}
	h := s
	if out.CurrentToken == 0 {
		if s.Live != 0 {
			return nil
		}
	} else {
		var ok bool
		if h, ok = holding(s, out.CurrentToken); !ok {
			return nil
		}
	}
	if in.Op == history.OpFenceCheck && out.Current != (out.CurrentToken != 0 && out.CurrentToken == in.Token) {
		return nil
	}
	if out.State != "" && out.State != h.Phase {
		return nil
	}
	if out.State == "" && in.Op == history.OpGetJob && h.Phase != "" {
		return nil
	}
	return []jobModelState{h}
}

func describeLinOp(input, output interface{}) string {
	in, out := input.(linInput), output.(linOutput)
	var b strings.Builder
	fmt.Fprintf(&b, "%s", in.Op)
	if in.Token != 0 {
		fmt.Fprintf(&b, "(%d", in.Token)
		if in.ReportID != "" {
			fmt.Fprintf(&b, ", %s %s", in.ReportID, in.Outcome)
		}
		b.WriteString(")")
	}
	if in.Replayed {
		b.WriteString(" replayed")
	}
	switch out.Status {
	case history.StatusOK:
		b.WriteString(" → ok")
		if out.State != "" {
			fmt.Fprintf(&b, " %s", out.State)
		}
		if in.Op == history.OpFenceCheck || in.Op == history.OpGetJob {
			fmt.Fprintf(&b, " current=%d", out.CurrentToken)
		}
	case history.StatusFail:
		fmt.Fprintf(&b, " → %s", out.Reason)
	default:
		b.WriteString(" → ?")
	}
	return b.String()
}

func describeJobState(state interface{}) string {
	s := state.(jobModelState)
	if s.Phase == "" {
		return "absent"
	}
	live := fmt.Sprint(s.Live)
	if s.Live == unknownToken {
		live = "unseen"
	}
	out := fmt.Sprintf("%s live=%s last=%d", s.Phase, live, s.Last)
	if s.Revoked {
		out += " revoked"
	}
	if s.TimedOut {
		out += " timed out"
	}
	return out
}
