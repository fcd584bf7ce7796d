package history

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Conversions from what the client returns to history values, so every
// runner writes the same strings.

// infoReasons are answers that leave a call's outcome unknown. The client
// retries them itself; one reaches the caller only when its context ends,
// and by then an earlier attempt may have landed.
var infoReasons = map[string]bool{
	transport.ReasonOutcomeUnknown: true,
	transport.ReasonTimeout:        true,
	transport.ReasonNotLeader:      true,
	transport.ReasonNoLeader:       true,
	transport.ReasonNotReady:       true,
	transport.ReasonShuttingDown:   true,
}

// Classify turns a client call's error into a status and reason: nil is
// ok; a server's definite answer (STALE_TOKEN, CONFLICT, NOT_FOUND, ...) is
// fail with that reason; anything that leaves the outcome open (the
// context ended, the connection broke, OUTCOME_UNKNOWN, TIMEOUT) is info.
// When in doubt it says info: calling a refusal unknown costs the checkers
// a little precision, calling an unknown a refusal makes them wrong.
func Classify(err error) (Status, string) {
	if err == nil {
		return StatusOK, ""
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return StatusInfo, transport.ReasonTimeout
	case errors.Is(err, context.Canceled):
		return StatusInfo, "CANCELED"
	case errors.Is(err, client.ErrClosed):
		return StatusInfo, "CLOSED"
	}
	var ce *client.Error
	if !errors.As(err, &ce) {
		return StatusInfo, "UNKNOWN"
	}
	if ce.Reason == "" {
		if ce.Code == connect.CodeDeadlineExceeded {
			return StatusInfo, transport.ReasonTimeout
		}
		return StatusInfo, "UNAVAILABLE"
	}
	if infoReasons[ce.Reason] {
		return StatusInfo, ce.Reason
	}
	return StatusFail, ce.Reason
}

// enumName lowercases an API enum's name without its prefix:
// JOB_STATE_QUEUED → queued. The unspecified value is "".
func enumName(name, prefix string) string {
	s := strings.ToLower(strings.TrimPrefix(name, prefix))
	if s == "unspecified" || s == "none" {
		return ""
	}
	return s
}

// JobStateOf names an API job state. Scheduled is the API's view of a
// queued job not yet due by the answering node's clock: the history (and
// the checkers' models) record the state the cluster stores, queued, and
// judge the time apart from it (the job's not_before).
func JobStateOf(s leaseholdv1.JobState) JobState {
	if s == leaseholdv1.JobState_JOB_STATE_SCHEDULED {
		return JobQueued
	}
	return JobState(enumName(s.String(), "JOB_STATE_"))
}

// unixNs is a timestamp in unix nanoseconds; 0 when unset.
func unixNs(t *timestamppb.Timestamp) int64 {
	if t == nil {
		return 0
	}
	return t.AsTime().UnixNano()
}

// LeaseStateOf names an API lease state.
func LeaseStateOf(s leaseholdv1.LeaseState) LeaseState {
	return LeaseState(enumName(s.String(), "LEASE_STATE_"))
}

// OutcomeOf names an API outcome.
func OutcomeOf(o leaseholdv1.Outcome) Outcome {
	return Outcome(enumName(o.String(), "OUTCOME_"))
}

// RevokeOf names an API revoke; none is "".
func RevokeOf(r leaseholdv1.Revoke) Revoke {
	return Revoke(enumName(r.String(), "REVOKE_"))
}

// VerdictOf names an API verdict.
func VerdictOf(v leaseholdv1.Verdict) VerdictKind {
	return VerdictKind(enumName(v.String(), "VERDICT_"))
}

// LeaseOf summarizes an API lease.
func LeaseOf(l *leaseholdv1.Lease) Lease {
	return Lease{
		Token: l.GetToken(), WorkerID: l.GetWorkerId(), RequestID: l.GetRequestId(),
		State: LeaseStateOf(l.GetState()), Revoke: RevokeOf(l.GetRevoke()), Started: l.GetStartedAt() != nil,
		ReportID: l.GetReportId(), Outcome: OutcomeOf(l.GetOutcome()), Retryable: l.GetRetryable(), Ref: l.GetRef(),
		GrantedAtNs: unixNs(l.GetGrantedAt()), EndedAtNs: unixNs(l.GetEndedAt()),
	}
}

// JobSummaryOf summarizes an API job, with every lease it keeps.
func JobSummaryOf(j *leaseholdv1.Job) JobSummary {
	s := JobSummary{
		ID: j.GetSpec().GetId(), State: JobStateOf(j.GetState()), Attempts: j.GetAttempts(),
		Losses: j.GetLosses(), Reason: j.GetReason(), Tokens: []uint64{},
		NotBeforeNs: unixNs(j.GetNotBefore()), MaxAttempts: j.GetSpec().GetMaxAttempts(),
	}
	if p := j.GetSpec().GetRetry(); p != nil {
		s.Retry = &RetryPolicy{InitialNs: int64(p.GetInitial().AsDuration()), MaxNs: int64(p.GetMax().AsDuration()),
			Multiplier: p.GetMultiplier(), Jitter: p.GetJitter()}
	}
	for _, l := range j.GetLeases() {
		ls := LeaseOf(l)
		s.Tokens = append(s.Tokens, ls.Token)
		s.Leases = append(s.Leases, ls)
		if ls.State == LeaseActive {
			s.CurrentToken = ls.Token
		}
		if ls.State == LeaseReported {
			s.Outcome = ls.Outcome
		}
	}
	return s
}

// GrantsOf lists the leases an acquire (or list_leases) answer holds.
func GrantsOf(gs []*leaseholdv1.Grant) []Grant {
	out := make([]Grant, 0, len(gs))
	for _, g := range gs {
		l := g.GetLease()
		out = append(out, Grant{
			JobID: l.GetJobId(), Token: l.GetToken(), WorkerID: l.GetWorkerId(),
			RequestID: l.GetRequestId(), Started: l.GetStartedAt() != nil,
			GrantedAtNs: unixNs(l.GetGrantedAt()), NotBeforeNs: unixNs(g.GetJob().GetNotBefore()),
		})
	}
	return out
}

// VerdictsOf lists a heartbeat answer's verdicts.
func VerdictsOf(r *leaseholdv1.HeartbeatResponse) []Verdict {
	out := make([]Verdict, 0, len(r.GetLeases()))
	for _, st := range r.GetLeases() {
		out = append(out, Verdict{
			JobID: st.GetJobId(), Token: st.GetToken(),
			Verdict: VerdictOf(st.GetVerdict()), Revoke: RevokeOf(st.GetRevoke()),
		})
	}
	return out
}

// ClusterEventOf converts an event read from node.
func ClusterEventOf(ev *leaseholdv1.Event, node string) *ClusterEvent {
	return &ClusterEvent{
		Seq: ev.GetSeq(), Index: ev.GetIndex(), Type: ev.GetType(), JobID: ev.GetJobId(),
		Token: ev.GetToken(), WorkerID: ev.GetWorkerId(), Ref: ev.GetRef(), Detail: ev.GetDetail(),
		TimeUnixNs: ev.GetTime().AsTime().UnixNano(), Node: node, Actor: ev.GetActor(), Source: ev.GetSource(),
	}
}
