package workload

import (
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Conversions from the API's messages to history inputs and outputs, one
// place for every op so the worker processes and the runner's actors write
// the same fields (history/doc.go lists what each op carries).

// methodOps names the history op of each API method the worker runtime
// calls (client.Observer's method names).
var methodOps = map[string]string{
	"RegisterWorker": history.OpRegister,
	"ListLeases":     history.OpListLeases,
	"StartLease":     history.OpStart,
	"Acquire":        history.OpAcquire,
	"Heartbeat":      history.OpHeartbeat,
	"Report":         history.OpReport,
	"Release":        history.OpRelease,
}

// OpOf is the history op and input of an API request; ok is false for a
// method that has no op.
func OpOf(method string, req proto.Message) (op string, in history.Input, ok bool) {
	op, ok = methodOps[method]
	if !ok {
		return "", history.Input{}, false
	}
	switch r := req.(type) {
	case *leaseholdv1.RegisterWorkerRequest:
		in = history.Input{WorkerID: r.GetWorkerId()}
	case *leaseholdv1.ListLeasesRequest:
		in = history.Input{WorkerID: r.GetWorkerId(), Stale: r.GetConsistency() == leaseholdv1.Consistency_CONSISTENCY_STALE}
	case *leaseholdv1.StartLeaseRequest:
		in = history.Input{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken()}
	case *leaseholdv1.AcquireRequest:
		in = AcquireInput(r)
	case *leaseholdv1.HeartbeatRequest:
		in = history.Input{WorkerID: r.GetWorkerId(), Leases: leaseRefs(r.GetLeases())}
	case *leaseholdv1.ReportRequest:
		in = ReportInput(r)
	case *leaseholdv1.ReleaseRequest:
		in = history.Input{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken(), Reason: r.GetReason()}
	default:
		return "", history.Input{}, false
	}
	return op, in, true
}

// OutputOf is the history output of an API response (nil for none).
func OutputOf(resp proto.Message) *history.Output {
	switch r := resp.(type) {
	case *leaseholdv1.RegisterWorkerResponse:
		return &history.Output{}
	case *leaseholdv1.ListLeasesResponse:
		return &history.Output{Leases: history.GrantsOf(r.GetLeases())}
	case *leaseholdv1.StartLeaseResponse:
		if r.GetLease() == nil {
			return &history.Output{}
		}
		l := history.LeaseOf(r.GetLease())
		return &history.Output{Lease: &l}
	case *leaseholdv1.AcquireResponse:
		return &history.Output{Grants: history.GrantsOf(r.GetGrants()), Replayed: r.GetReplayed()}
	case *leaseholdv1.HeartbeatResponse:
		out := &history.Output{Verdicts: history.VerdictsOf(r)}
		for _, l := range r.GetUnnamed() {
			out.Unnamed = append(out.Unnamed, history.LeaseRef{JobID: l.GetJobId(), Token: l.GetToken()})
		}
		return out
	case *leaseholdv1.ReportResponse:
		return &history.Output{Outcome: history.OutcomeOf(r.GetOutcome()), State: history.JobStateOf(r.GetState()), Requeued: r.GetRequeued()}
	case *leaseholdv1.ReleaseResponse:
		return JobOutput(r.GetJob())
	}
	return nil
}

// AcquireInput is an acquire's input.
func AcquireInput(r *leaseholdv1.AcquireRequest) history.Input {
	return history.Input{WorkerID: r.GetWorkerId(), RequestID: r.GetRequestId(), Max: max(r.GetMax(), 1), Start: r.GetStart()}
}

// ReportInput is a report's input.
func ReportInput(r *leaseholdv1.ReportRequest) history.Input {
	return history.Input{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken(), ReportID: r.GetReportId(),
		Outcome: history.OutcomeOf(r.GetOutcome()), Retryable: r.GetRetryable(), Ref: r.GetRef(),
		RetryAfterNs: int64(r.GetRetryAfter().AsDuration())}
}

// JobOutput carries a job (and its state) as an answer; nil job, empty
// output.
func JobOutput(j *leaseholdv1.Job) *history.Output {
	if j == nil {
		return &history.Output{}
	}
	s := history.JobSummaryOf(j)
	return &history.Output{Job: &s, State: s.State}
}

func leaseRefs(refs []*leaseholdv1.LeaseRef) []history.LeaseRef {
	out := make([]history.LeaseRef, 0, len(refs))
	for _, r := range refs {
		out = append(out, history.LeaseRef{JobID: r.GetJobId(), Token: r.GetToken()})
	}
	return out
}
