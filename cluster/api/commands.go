package api

import (
	"strings"
	"time"

	"github.com/leasehold/leasehold/fsm"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

// The write requests' translations into the state machine's commands,
// filling the API's defaults. A translation refuses what the command cannot
// say (an enum number the API does not name, a field the command calls
// otherwise); the command is validated before it is proposed (applyAs) and
// again when it is encoded for the log.

// submitOf translates a submit on the leader, whose clock (now) run_in
// counts from.
func submitOf(r *pb.SubmitJobRequest, now time.Time) (*fsm.SubmitJob, error) {
	if r.GetSpec() == nil {
		return nil, rules.Invalid("spec", "must be set")
	}
	spec, err := specFromProto(r.GetSpec())
	if err != nil {
		return nil, err
	}
	if slotJobID(spec.ID) {
		return nil, rules.Invalid("spec.id", "%q has the form of a schedule slot's job id (NAME@YYYY-MM-DDTHH:MM:SSZ), which only a schedule's slot may use: choose another id", spec.ID)
	}
	cmd := &fsm.SubmitJob{Spec: spec}
	if t := r.GetSpec().Timeout; t != nil {
		d := t.AsDuration()
		if !t.IsValid() || d != 0 && (d < rules.MinTimeout || d > rules.MaxTimeout) || d%time.Millisecond != 0 {
			return nil, rules.Invalid("spec.timeout", "must be 0 (none) or %s to %s, in whole milliseconds", rules.MinTimeout, rules.MaxTimeout)
		}
		cmd.TimeoutMs = uint32(d / time.Millisecond)
	}
	switch {
	case r.RunAt != nil && r.RunIn != nil:
		return nil, rules.Invalid("run_at", "set run_at or run_in, not both")
	case r.RunAt != nil:
		// Compared as times before the conversion: UnixNano wraps past 2262.
		at := r.GetRunAt().AsTime()
		if err := r.GetRunAt().CheckValid(); err != nil || at.Before(time.Unix(0, 0)) {
			return nil, rules.Invalid("run_at", "not a time after 1970")
		}
		if at.After(now.Add(maxRunAhead)) {
			return nil, rules.Invalid("run_at", "more than %s ahead", maxRunAhead)
		}
		cmd.RunAt = at.UnixNano()
	case r.RunIn != nil:
		d := r.GetRunIn().AsDuration()
		if !r.GetRunIn().IsValid() || d < 0 || d > maxRunAhead {
			return nil, rules.Invalid("run_in", "must be 0 to %s", maxRunAhead)
		}
		cmd.RunAt = now.Add(d).UnixNano()
	}
	return cmd, nil
}

// slotJobID says whether id is one a schedule's slot may submit
// (fsm.ScheduleJobID): a schedule name, "@", and a time in RFC 3339, UTC,
// to the second, exactly as the leader formats it. Such an id is refused
// from clients: a job submitted under a slot's id first would take the
// slot's place, and the slot would be skipped for good. Any other id with
// an '@' (a fraction of a second, an offset, a name a schedule cannot
// have) is an ordinary id.
func slotJobID(id string) bool {
	name, at, ok := strings.Cut(id, "@")
	if !ok || rules.CheckName("", name) != nil {
		return false
	}
	t, err := time.Parse(time.RFC3339, at)
	return err == nil && t.UTC().Format(time.RFC3339) == at
}

// maxRunAhead bounds how far ahead a job may be submitted to run.
const maxRunAhead = 366 * 24 * time.Hour

func cancelOf(r *pb.CancelJobRequest) (*fsm.Cancel, error) {
	if err := rules.CheckID("id", r.GetId()); err != nil {
		return nil, err
	}
	return &fsm.Cancel{JobID: r.GetId(), Kill: r.GetKill(), Reason: r.GetReason()}, nil
}

func retryOf(r *pb.RetryJobRequest) (*fsm.RetryJob, error) {
	if err := rules.CheckID("id", r.GetId()); err != nil {
		return nil, err
	}
	return &fsm.RetryJob{JobID: r.GetId(), Reason: r.GetReason()}, nil
}

// purgeOf translates a purge: by ids, or by queue and/or age (older_than
// counted back from the leader's time as the state machine applies it).
func purgeOf(r *pb.PurgeJobsRequest) (*fsm.PurgeJobs, error) {
	cmd := &fsm.PurgeJobs{JobIDs: r.GetIds(), Queue: r.GetQueue(), Limit: r.GetLimit(), Reason: r.GetReason()}
	byAge := r.OlderThan != nil
	switch {
	case len(cmd.JobIDs) == 0 && cmd.Queue == "" && !byAge:
		return nil, rules.Invalid("ids", "name job ids, a queue or an age (older_than 0s: every dead job)")
	case len(cmd.JobIDs) > 0 && (cmd.Queue != "" || byAge):
		return nil, rules.Invalid("ids", "purge by ids, or by queue and age, not both")
	}
	if byAge {
		d := r.GetOlderThan().AsDuration()
		if !r.GetOlderThan().IsValid() || d < 0 || d.Nanoseconds() > fsm.MaxPurgeAge {
			return nil, rules.Invalid("older_than", "must be 0 to %s", time.Duration(fsm.MaxPurgeAge))
		}
		cmd.OlderThan = d.Nanoseconds()
	}
	if cmd.Limit == 0 {
		cmd.Limit = fsm.MaxPurgeBatch
	}
	return cmd, nil
}

func cancelSubmitterOf(r *pb.CancelSubmitterJobsRequest) (*fsm.CancelSubmitter, error) {
	limit := r.GetLimit()
	if limit == 0 {
		limit = rules.MaxCancelBatch
	}
	return &fsm.CancelSubmitter{Submitter: r.GetSubmitter(), Limit: limit, Reason: r.GetReason()}, nil
}

func pauseOf(r *pb.PauseQueueRequest) (*fsm.SetQueue, error) {
	return &fsm.SetQueue{Queue: r.GetQueue(), SetPaused: true, Paused: true}, nil
}

func resumeOf(r *pb.ResumeQueueRequest) (*fsm.SetQueue, error) {
	return &fsm.SetQueue{Queue: r.GetQueue(), SetPaused: true}, nil
}

func queueLimitOf(r *pb.SetQueueLimitRequest) (*fsm.SetQueue, error) {
	return &fsm.SetQueue{Queue: r.GetQueue(), SetMaxRunning: true, MaxRunning: r.GetMaxRunning()}, nil
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
	if r.RetryAfter != nil && !r.GetRetryAfter().IsValid() {
		return nil, rules.Invalid("retry_after", "not a duration")
	}
	return &fsm.Report{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken(), ReportID: r.GetReportId(),
		Outcome: fsm.Outcome(r.GetOutcome()), Retryable: r.GetRetryable(), Ref: r.GetRef(), Message: r.GetMessage(),
		RetryAfter: int64(r.GetRetryAfter().AsDuration())}, nil
}

func releaseOf(r *pb.ReleaseRequest) (*fsm.Release, error) {
	return &fsm.Release{WorkerID: r.GetWorkerId(), JobID: r.GetJobId(), Token: r.GetToken(), Reason: r.GetReason(), Lost: r.GetLost()}, nil
}
