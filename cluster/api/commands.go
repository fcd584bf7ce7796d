package api

import (
	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

// The write requests' translations into the state machine's commands,
// filling the API's defaults. A translation refuses what the command cannot
// say (an enum number the API does not name, a field the command calls
// otherwise); the command is validated before it is proposed (applyAs) and
// again when it is encoded for the log.

func submitOf(r *pb.SubmitJobRequest) (*fsm.SubmitJob, error) {
	if r.GetSpec() == nil {
		return nil, rules.Invalid("spec", "must be set")
	}
	spec, err := specFromProto(r.GetSpec())
	if err != nil {
		return nil, err
	}
	return &fsm.SubmitJob{Spec: spec}, nil
}

func cancelOf(r *pb.CancelJobRequest) (*fsm.Cancel, error) {
	if err := rules.CheckID("id", r.GetId()); err != nil {
		return nil, err
	}
	return &fsm.Cancel{JobID: r.GetId(), Kill: r.GetKill(), Reason: r.GetReason()}, nil
}

func cancelSubmitterOf(r *pb.CancelSubmitterJobsRequest) (*fsm.CancelSubmitter, error) {
	limit := r.GetLimit()
	if limit == 0 {
		limit = rules.MaxCancelBatch
	}
	return &fsm.CancelSubmitter{Submitter: r.GetSubmitter(), Limit: limit, Reason: r.GetReason()}, nil
}

func registerOf(r *pb.RegisterWorkerRequest) (*fsm.RegisterWorker, error) {
	return &fsm.RegisterWorker{WorkerID: r.GetWorkerId(), Capacity: r.GetCapacity(), Version: r.GetVersion()}, nil
}

func deregisterOf(r *pb.DeregisterWorkerRequest) (*fsm.DeregisterWorker, error) {
	return &fsm.DeregisterWorker{WorkerID: r.GetWorkerId(), Lost: r.GetLost()}, nil
}

func acquireOf(r *pb.AcquireRequest) (*fsm.Acquire, error) {
	max := r.GetMax()
	if max == 0 {
		max = 1
	}
	return &fsm.Acquire{WorkerID: r.GetWorkerId(), RequestID: r.GetRequestId(), Queues: r.GetQueues(),
		Kinds: r.GetKinds(), Max: max, Start: r.GetStart()}, nil
}

func startOf(r *pb.StartLeaseRequest) (*fsm.Start, error) {
	return &fsm.Start{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken()}, nil
}

func reportOf(r *pb.ReportRequest) (*fsm.Report, error) {
	if _, ok := pb.Outcome_name[int32(r.GetOutcome())]; !ok {
		return nil, rules.Invalid("outcome", "unknown value %d", r.GetOutcome())
	}
	return &fsm.Report{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken(), ReportID: r.GetReportId(),
		Outcome: fsm.Outcome(r.GetOutcome()), Retryable: r.GetRetryable(), Ref: r.GetRef(), Message: r.GetMessage()}, nil
}

func releaseOf(r *pb.ReleaseRequest) (*fsm.Release, error) {
	return &fsm.Release{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken(), Reason: r.GetReason(), Lost: r.GetLost()}, nil
}
