package fsm

// EventType names what happened. Numbers are stored in snapshots: append only.
type EventType uint8

const (
	EventJobSubmitted       EventType = 1
	EventLeaseAcquired      EventType = 2
	EventLeaseStarted       EventType = 3
	EventLeaseReported      EventType = 4
	EventLeaseExpired       EventType = 5
	EventLeaseReleased      EventType = 6
	EventLeaseRevoked       EventType = 7
	EventStaleReport        EventType = 8  // a report with a stale token, refused; carries the ref
	EventReportConflict     EventType = 9  // a second, different report on a reported lease
	EventJobCancelled       EventType = 10 // a queued job cancelled, or a revoked job ended
	EventJobLost            EventType = 11 // worker lost, policy "fail"
	EventJobFailed          EventType = 12 // poison job
	EventJobRequeued        EventType = 13
	EventSubmitConflict     EventType = 14 // same job id, another spec
	EventStaleAction        EventType = 15 // start or release with a stale token, refused
	EventWorkerRegistered   EventType = 16
	EventWorkerDeregistered EventType = 17
	EventWorkerUnreachable  EventType = 18 // recorded by the leader (RecordEvent)
	EventWorkerReachable    EventType = 19 // recorded by the leader
	EventAbsenceRule        EventType = 20 // recorded by the leader: a gap was not charged to workers
	EventLeaderChanged      EventType = 21 // recorded by the leader
	EventTokenFloorRaised   EventType = 22
	EventJobsCompacted      EventType = 23
	EventNodeSet            EventType = 24
	EventNodeRemoved        EventType = 25
	EventAudit              EventType = 26 // an admin action or a refused attempt: Actor, Source, Detail
	EventQuotaExceeded      EventType = 27 // recorded by the leader: submits refused, the state at its quota
	EventQuotaCleared       EventType = 28 // recorded by the leader: the state back under its quota
	EventJobScheduled       EventType = 29 // a job submitted to run later: Detail says when
	EventRetryScheduled     EventType = 30 // a retryable failure queued again after a delay: Detail says it
	EventJobDead            EventType = 31 // out of attempts or stopped by the poison limit: Detail is the reason
	EventJobRetried         EventType = 32 // a dead job queued again with a fresh attempt budget
	EventJobsPurged         EventType = 33 // dead jobs removed: Detail counts them
	EventQueuePaused        EventType = 35 // Detail: the queue
	EventQueueResumed       EventType = 36 // Detail: the queue
	EventQueueLimited       EventType = 37 // Detail: the queue and its new limit
	EventLeaseTimedOut      EventType = 34 // a lease past its job's timeout, revoked with a kill: Detail says the timeout
	EventScheduleFired      EventType = 38 // a schedule's slot submitted its job (JobID); Detail: the slot, slots skipped before it
	EventScheduleSkipped    EventType = 39 // a schedule's slots settled without a job: Detail says how many and why
	EventScheduleCreated    EventType = 40 // a schedule created or updated: Detail says which
	EventScheduleDeleted    EventType = 41
	EventSchedulePaused     EventType = 42 // a schedule paused or resumed: Detail says which
)

var eventTypeNames = map[EventType]string{
	EventJobSubmitted:       "job.submitted",
	EventLeaseAcquired:      "lease.acquired",
	EventLeaseStarted:       "lease.started",
	EventLeaseReported:      "lease.reported",
	EventLeaseExpired:       "lease.expired",
	EventLeaseReleased:      "lease.released",
	EventLeaseRevoked:       "lease.revoked",
	EventStaleReport:        "lease.stale_report",
	EventReportConflict:     "lease.report_conflict",
	EventJobCancelled:       "job.cancelled",
	EventJobLost:            "job.lost",
	EventJobFailed:          "job.failed",
	EventJobRequeued:        "job.requeued",
	EventSubmitConflict:     "job.submit_conflict",
	EventStaleAction:        "lease.stale_action",
	EventWorkerRegistered:   "worker.registered",
	EventWorkerDeregistered: "worker.deregistered",
	EventWorkerUnreachable:  "worker.unreachable",
	EventWorkerReachable:    "worker.reachable",
	EventAbsenceRule:        "leader.absence_rule",
	EventLeaderChanged:      "leader.changed",
	EventTokenFloorRaised:   "tokens.floor_raised",
	EventJobsCompacted:      "jobs.compacted",
	EventNodeSet:            "node.set",
	EventNodeRemoved:        "node.removed",
	EventAudit:              "audit",
	EventQuotaExceeded:      "quota.exceeded",
	EventQuotaCleared:       "quota.cleared",
	EventJobScheduled:       "job.scheduled",
	EventRetryScheduled:     "job.retry_scheduled",
	EventJobDead:            "job.dead",
	EventJobRetried:         "job.retried",
	EventJobsPurged:         "jobs.purged",
	EventQueuePaused:        "queue.paused",
	EventQueueResumed:       "queue.resumed",
	EventQueueLimited:       "queue.limited",
	EventLeaseTimedOut:      "lease.timed_out",
	EventScheduleFired:      "schedule.fired",
	EventScheduleSkipped:    "schedule.skipped",
	EventScheduleCreated:    "schedule.created",
	EventScheduleDeleted:    "schedule.deleted",
	EventSchedulePaused:     "schedule.paused",
}

func (t EventType) String() string { return enumName(eventTypeNames, t) }

// snapVersion is the lowest snapshot version whose readers know the type:
// 5 for the events of jobs that wait (29, 30), 6 for those of level 6 (31
// to 42), 0 for the older ones, which every version holds. A snapshot is
// written in at least the version of every event it keeps.
func (t EventType) snapVersion() byte {
	switch {
	case t >= EventJobDead:
		return 6
	case t == EventJobScheduled || t == EventRetryScheduled:
		return 5
	}
	return 0
}

// ParseEventType is the inverse of String.
func ParseEventType(s string) (EventType, bool) { return enumParse(eventTypeNames, s) }

// recordable are the event types the leader may record with RecordEvent:
// facts about time and leadership that only the leader observes.
var recordable = map[EventType]bool{
	EventWorkerUnreachable: true,
	EventWorkerReachable:   true,
	EventAbsenceRule:       true,
	EventLeaderChanged:     true,
	EventQuotaExceeded:     true,
	EventQuotaCleared:      true,
}

// Event is one entry of the replicated event log.
type Event struct {
	Seq      uint64 // strictly increasing, starts at 1
	Index    uint64 // raft index of the command that produced it
	Time     int64  // the command's leader-stamped time, unix nanoseconds
	Type     EventType
	JobID    string
	Token    uint64
	WorkerID string
	Ref      string // a report's output ref (reported, stale_report)
	Detail   string // reason, outcome or message
	Actor    string // audit: who (token name, certificate identity, node)
	Source   string // audit: the caller's address
}
