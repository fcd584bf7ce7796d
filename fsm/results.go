package fsm

// Results returned by Apply, one per command type:
//
//	RegisterWorker   Worker
//	DeregisterWorker DeregisterResult
//	SubmitJob        SubmitResult
//	Acquire          AcquireResult
//	Start            HeldLease
//	Report           ReportResult
//	Release          Job
//	Cancel           CancelResult
//	CancelSubmitter  CancelSubmitterResult
//	Expire           ExpireResult
//	Compact          CompactResult
//	RaiseTokenFloor  FloorResult
//	RecordEvent      Event
//	SetNode          Node
//	RemoveNode       nil
//	RecordEvents     nil
//	Audit            nil
//	RemoveIdle       RemoveIdleResult
//	RetryJob         Job
//	PurgeJobs        PurgeResult
//	SetQueue         QueueSettings
//	TimeOut          TimeOutResult
//
// Every value is a copy: holding it never pins or races with the state.

// SubmitResult is the job as stored; Created is false when an identical
// submission already existed.
type SubmitResult struct {
	Job     Job
	Created bool
}

// DeregisterResult lists the leases the deregistration ended (released,
// or with Lost expired).
type DeregisterResult struct {
	Released []LeaseRef
}

// RemoveIdleResult splits the listed workers into the ones removed and the
// ones kept (not registered, or holding a live lease), in the command's
// order.
type RemoveIdleResult struct {
	Removed []string
	Kept    []string
}

// Grant is one lease an acquire granted, with its job. ReadySince is when
// the job became ready (what the queue wait is measured from, as Queues'
// OldestReady): zero in a replayed answer.
type Grant struct {
	Job        Job
	Lease      Lease
	ReadySince int64
}

// AcquireResult lists the granted leases. Replayed is true when the request
// id had already been served and the grants are the first answer's (their
// leases may have ended since).
type AcquireResult struct {
	Grants   []Grant
	Replayed bool
}

// ReportResult is the answer to a report. A repeated report gets the very
// same value.
type ReportResult struct {
	JobID    string
	Token    uint64
	Outcome  Outcome
	State    JobState // the job's state right after the report
	Requeued bool     // a retryable failure sent the job back to its queue
	// Queue is the job's; Ran the lease's time from its grant to the
	// report, in nanoseconds of leader time (for metrics).
	Queue string
	Ran   int64
}

// CancelResult is the job after a cancel. Revoked is true when the job was
// leased and its lease now carries a revoke.
type CancelResult struct {
	Job     Job
	Revoked bool
}

// CancelSubmitterResult lists the cancelled jobs; Remaining counts queued
// jobs of the submitter still left (the call's limit was reached).
type CancelSubmitterResult struct {
	Cancelled []string
	Remaining int
}

// ExpireResult splits the listed leases into the ones this command ended and
// the ones it ignored because they were no longer current.
type ExpireResult struct {
	Expired []LeaseRef
	Ignored []LeaseRef
}

// TimeOutResult splits the listed leases into the ones this command
// revoked for their timeout and the ones it ignored (no longer current,
// already revoked, or not yet past their deadline by the command's time).
type TimeOutResult struct {
	TimedOut []LeaseRef
	Ignored  []LeaseRef
}

// CompactResult counts what was removed; More is true when the job limit
// was reached before the cutoff.
type CompactResult struct {
	Jobs   int
	Events int
	More   bool
}

// FloorResult is the token the next grant will carry.
type FloorResult struct {
	Next uint64
}

// PurgeResult lists the dead jobs a purge removed and, for one by ids, the
// listed jobs it skipped (unknown, or not dead); More is true when its
// limit was reached with matching dead jobs left.
type PurgeResult struct {
	Purged  []string
	Skipped []string
	More    bool
}
