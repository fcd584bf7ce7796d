package api

import (
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// commandOf translates a write request into the state machine's command,
// filling the API's defaults. The command is validated when it is encoded
// for the log (fsm.Encode), so nothing invalid reaches Raft; it returns
// false for messages that are not writes.
func commandOf(m proto.Message) (fsm.Command, bool) {
	switch r := m.(type) {
	case *pb.SubmitJobRequest:
		return &fsm.SubmitJob{Spec: specFromProto(r.GetSpec())}, true
	case *pb.CancelJobRequest:
		return &fsm.Cancel{JobID: r.GetId(), Kill: r.GetKill(), Reason: r.GetReason()}, true
	case *pb.CancelSubmitterJobsRequest:
		limit := r.GetLimit()
		if limit == 0 {
			limit = fsm.MaxCancelBatch
		}
		return &fsm.CancelSubmitter{Submitter: r.GetSubmitter(), Limit: limit, Reason: r.GetReason()}, true
	case *pb.RegisterWorkerRequest:
		return &fsm.RegisterWorker{WorkerID: r.GetWorkerId(), Capacity: r.GetCapacity()}, true
	case *pb.DeregisterWorkerRequest:
		return &fsm.DeregisterWorker{WorkerID: r.GetWorkerId()}, true
	case *pb.AcquireRequest:
		max := r.GetMax()
		if max == 0 {
			max = 1
		}
		return &fsm.Acquire{WorkerID: r.GetWorkerId(), RequestID: r.GetRequestId(), Queues: r.GetQueues(),
			Kinds: r.GetKinds(), Max: max, Start: r.GetStart()}, true
	case *pb.StartLeaseRequest:
		return &fsm.Start{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken()}, true
	case *pb.ReportRequest:
		return &fsm.Report{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken(), ReportID: r.GetReportId(),
			Outcome: fsm.Outcome(r.GetOutcome()), Retryable: r.GetRetryable(), Ref: r.GetRef(), Message: r.GetMessage()}, true
	case *pb.ReleaseRequest:
		return &fsm.Release{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken(), Reason: r.GetReason()}, true
	}
	return nil, false
}
