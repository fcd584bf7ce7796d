package api

import (
	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// The write requests' translations into the state machine's commands,
// filling the API's defaults. Each command is validated before it is
// proposed (applyAs) and again when it is encoded for the log.

func submitOf(r *pb.SubmitJobRequest) *fsm.SubmitJob {
	return &fsm.SubmitJob{Spec: specFromProto(r.GetSpec())}
}

func cancelOf(r *pb.CancelJobRequest) *fsm.Cancel {
	return &fsm.Cancel{JobID: r.GetId(), Kill: r.GetKill(), Reason: r.GetReason()}
}

func cancelSubmitterOf(r *pb.CancelSubmitterJobsRequest) *fsm.CancelSubmitter {
	limit := r.GetLimit()
	if limit == 0 {
		limit = fsm.MaxCancelBatch
	}
	return &fsm.CancelSubmitter{Submitter: r.GetSubmitter(), Limit: limit, Reason: r.GetReason()}
}

func registerOf(r *pb.RegisterWorkerRequest) *fsm.RegisterWorker {
	return &fsm.RegisterWorker{WorkerID: r.GetWorkerId(), Capacity: r.GetCapacity()}
}

func deregisterOf(r *pb.DeregisterWorkerRequest) *fsm.DeregisterWorker {
	return &fsm.DeregisterWorker{WorkerID: r.GetWorkerId()}
}

func acquireOf(r *pb.AcquireRequest) *fsm.Acquire {
	max := r.GetMax()
	if max == 0 {
		max = 1
	}
	return &fsm.Acquire{WorkerID: r.GetWorkerId(), RequestID: r.GetRequestId(), Queues: r.GetQueues(),
		Kinds: r.GetKinds(), Max: max, Start: r.GetStart()}
}

func startOf(r *pb.StartLeaseRequest) *fsm.Start {
	return &fsm.Start{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken()}
}

func reportOf(r *pb.ReportRequest) *fsm.Report {
	return &fsm.Report{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken(), ReportID: r.GetReportId(),
		Outcome: fsm.Outcome(r.GetOutcome()), Retryable: r.GetRetryable(), Ref: r.GetRef(), Message: r.GetMessage()}
}

func releaseOf(r *pb.ReleaseRequest) *fsm.Release {
	return &fsm.Release{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken(), Reason: r.GetReason()}
}
