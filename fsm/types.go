package fsm

import (
	"fmt"
	"math"
	"unsafe"
)

// JobState is where a job is in its life. Numbers are stored in snapshots:
// append only.
type JobState uint8

const (
	JobQueued    JobState = 1 // waiting for a worker
	JobAcquired  JobState = 2 // leased, not started
	JobRunning   JobState = 3 // leased and started
	JobReported  JobState = 4 // terminal: the worker reported an outcome
	JobCancelled JobState = 5 // terminal: cancelled before or during a lease
	JobLost      JobState = 6 // terminal: worker lost, policy "fail"
	JobFailed    JobState = 7 // terminal: poison job, its worker was lost too often
	// JobDead is terminal (from cluster level 6): out of attempts or
	// stopped by the poison limit, its last error kept. Unlike the other
	// terminal states it is kept until purged or retried (RetryJob), never
	// compacted by retention.
	JobDead JobState = 8
)

var jobStateNames = map[JobState]string{
	JobQueued: "queued", JobAcquired: "acquired", JobRunning: "running", JobReported: "reported",
	JobCancelled: "cancelled", JobLost: "lost", JobFailed: "failed", JobDead: "dead",
}

func (s JobState) String() string { return enumName(jobStateNames, s) }

// Terminal reports whether the job will never change state again.
func (s JobState) Terminal() bool { return s >= JobReported && s <= JobDead }

// Leased reports whether the job has a live lease.
func (s JobState) Leased() bool { return s == JobAcquired || s == JobRunning }

// ParseJobState is the inverse of String.
func ParseJobState(s string) (JobState, bool) { return enumParse(jobStateNames, s) }

// LeaseState is where a lease is in its life.
type LeaseState uint8

const (
	LeaseActive   LeaseState = 1 // live: the worker holds the job
	LeaseReported LeaseState = 2 // ended by the worker's report
	LeaseExpired  LeaseState = 3 // ended by the leader: worker silent past toleration
	LeaseReleased LeaseState = 4 // given back by the worker (or its deregistration)
)

var leaseStateNames = map[LeaseState]string{
	LeaseActive: "active", LeaseReported: "reported", LeaseExpired: "expired", LeaseReleased: "released",
}

func (s LeaseState) String() string { return enumName(leaseStateNames, s) }

// Revoke says whether and how a live lease's job must stop.
type Revoke uint8

const (
	RevokeNone   Revoke = 0
	RevokeCancel Revoke = 1 // stop gracefully
	RevokeKill   Revoke = 2 // stop now
	// RevokeTimeout is a kill the leader asked for because the lease ran
	// past its job's timeout (timeouts.go): the worker is told kill, and
	// the lease's end is an attempt that timed out, not a cancellation.
	RevokeTimeout Revoke = 3
)

var revokeNames = map[Revoke]string{RevokeNone: "none", RevokeCancel: "cancel", RevokeKill: "kill", RevokeTimeout: "timeout"}

// Kills says whether the worker must stop the job now: a kill, or a
// timeout (which the worker is told as a kill).
func (r Revoke) Kills() bool { return r == RevokeKill || r == RevokeTimeout }

func (r Revoke) String() string { return enumName(revokeNames, r) }

// Outcome is a worker's final word on a lease.
type Outcome uint8

const (
	OutcomeSucceeded Outcome = 1
	OutcomeFailed    Outcome = 2
	OutcomeCancelled Outcome = 3
	OutcomeKilled    Outcome = 4
	// OutcomeTimedOut is the leader's word, never a worker's: the lease
	// ran past its job's timeout and ended (reported with any outcome,
	// released or expired) after the leader revoked it.
	OutcomeTimedOut Outcome = 5
)

var outcomeNames = map[Outcome]string{
	OutcomeSucceeded: "succeeded", OutcomeFailed: "failed", OutcomeCancelled: "cancelled", OutcomeKilled: "killed",
	OutcomeTimedOut: "timed_out",
}

func (o Outcome) String() string { return enumName(outcomeNames, o) }

// ParseOutcome is the inverse of String.
func ParseOutcome(s string) (Outcome, bool) { return enumParse(outcomeNames, s) }

// LostPolicy says what happens to a job whose worker is lost.
type LostPolicy uint8

const (
	// LostRequeue queues the job again; the next grant has a new token
	// (evaluation-style).
	LostRequeue LostPolicy = 1
	// LostFail ends the job as JobLost with reason "worker lost" (run-style).
	LostFail LostPolicy = 2
)

var lostPolicyNames = map[LostPolicy]string{LostRequeue: "requeue", LostFail: "fail"}

func (p LostPolicy) String() string { return enumName(lostPolicyNames, p) }

// ParseLostPolicy is the inverse of String.
func ParseLostPolicy(s string) (LostPolicy, bool) { return enumParse(lostPolicyNames, s) }

// Reasons recorded on jobs that end without a report.
const (
	ReasonWorkerLost = "worker lost"
	ReasonPoison     = "poison: worker lost too many times"
	ReasonCancelled  = "cancelled"
)

func enumName[K comparable](names map[K]string, k K) string {
	if s, ok := names[k]; ok {
		return s
	}
	return "unknown"
}

func enumParse[K comparable](names map[K]string, s string) (K, bool) {
	for k, n := range names {
		if n == s {
			return k, true
		}
	}
	var zero K
	return zero, false
}

// JobSpec is what an executor submits. Two submissions with the same ID are
// the same job when every field is equal.
//
// The fields of JobSpec and Lease are ordered by size, the small ones last
// and together, and Job's small ones sit together after Seq, so a million
// of each waste little padding: Job fills the 192-byte size class and
// Lease the 80-byte one (TestRecordSizes, BenchmarkMemoryPerLiveLease).
type JobSpec struct {
	ID        string
	Queue     string
	Kind      string
	Payload   []byte
	Submitter string
	Priority  int32 // higher runs first
	// MaxAttempts bounds the executions of a job whose executions fail
	// retryably: a retryable failure requeues the job while its failures
	// (Job.Attempts) are below MaxAttempts.
	MaxAttempts uint32
	// MaxWorkerLosses fails the job as a poison job after this many expired
	// leases (with LostRequeue).
	MaxWorkerLosses uint32
	// OnWorkerLost is the policy when a lease expires.
	OnWorkerLost LostPolicy
	// Retry spaces the retries of retryable failures (retry.go); nil queues
	// the job again at once, as every job did before codec version 5.
	Retry *RetryPolicy
}

// Job is one unit of work and everything the state machine knows of it. Values
// returned by queries are copies.
type Job struct {
	JobSpec
	Seq uint64 // submission order, unique; the age in "priority, then age"
	// Attempts counts the executions that reported a failure, retryable or
	// final, or timed out: what MaxAttempts bounds. The API's attempts is Executions.
	Attempts uint32
	Losses   uint32 // leases that expired
	State    JobState
	// nLeases and capLeases are the length and capacity of the job's
	// leases (Leases), kept in State's padding: with leases, a pointer, in
	// place of a slice's 24 bytes, the record is 192 bytes, a size class
	// below 208. A job keeps at most MaxLeaseHistory leases.
	nLeases, capLeases uint8
	// TimeoutMs is the job's execution timeout in milliseconds, zero for
	// none: a lease still live TimeoutMs after its GrantedAt is revoked by
	// the leader (timeouts.go). It is how to run the job, not what it is
	// (sameSpec ignores it, as it does the run-at time), and it sits here,
	// in Job's padding after State, rather than in JobSpec, where it would
	// grow every job by 16 bytes. Only codec version 6 carries it.
	TimeoutMs   uint32
	SubmittedAt int64 // unix nanoseconds, stamped by the leader
	UpdatedAt   int64
	// end holds when and why the job ended (FinishedAt, FinishSeq, Reason),
	// nil while it has not: most jobs kept at scale are live ones, and the
	// 32 bytes out of line keep the record in a smaller size class. It is
	// never mutated once set, so copies of the job may share it.
	end *jobEnd
	// leases points at the first of the job's leases (Leases), nil when
	// it has no room for any.
	leases      *Lease
	CreateIndex uint64 // raft index of the submit
	ModifyIndex uint64 // raft index of the last change
	// NotBefore is the leader time (unix nanoseconds) before which the job
	// is not granted: its run-at time, then after a retryable failure the
	// end of its backoff. Zero or past: ready when queued (delayed.go).
	NotBefore int64
}

// jobEnd is how a job ended; see Job.end.
type jobEnd struct {
	finishedAt int64  // leader time the job turned terminal
	finishSeq  uint64 // its place in finish order
	reason     string // why it ended, for terminal states without a report
}

// FinishedAt is the leader time (unix nanoseconds) the job turned
// terminal, zero while it is not.
func (j *Job) FinishedAt() int64 {
	if j.end == nil {
		return 0
	}
	return j.end.finishedAt
}

// FinishSeq is the job's place in the order jobs turned terminal, zero
// while it is not terminal.
func (j *Job) FinishSeq() uint64 {
	if j.end == nil {
		return 0
	}
	return j.end.finishSeq
}

// Reason says why the job ended, for terminal states without a report.
func (j *Job) Reason() string {
	if j.end == nil {
		return ""
	}
	return j.end.reason
}

// Leases returns the job's most recent leases, oldest first; tokens
// strictly increase along it, and only the last one can be active. The
// slice is the job's own, as a slice field would be: writing an element
// writes the job's lease, and appending to it changes the job only once
// given back to SetLeases.
func (j *Job) Leases() []Lease {
	if j.leases == nil {
		return nil
	}
	return unsafe.Slice(j.leases, j.capLeases)[:j.nLeases]
}

// SetLeases makes ls (the slice itself, not a copy) the job's leases, as
// assigning a slice field would. A job keeps at most MaxLeaseHistory
// leases; more than 255 is a bug in the caller and panics. Room past 255
// is not remembered (the slice is kept as if capped there).
func (j *Job) SetLeases(ls []Lease) {
	if len(ls) > math.MaxUint8 {
		panic(fmt.Sprintf("fsm: a job given %d leases", len(ls)))
	}
	if cap(ls) == 0 {
		j.leases, j.nLeases, j.capLeases = nil, 0, 0
		return
	}
	j.leases, j.nLeases, j.capLeases = unsafe.SliceData(ls), uint8(len(ls)), uint8(min(cap(ls), math.MaxUint8))
}

// String prints every field, the ones kept out of line too, so that two
// equal jobs print alike (as %v printed the struct before they moved).
func (j Job) String() string {
	return fmt.Sprintf("{JobSpec:%+v Seq:%d Attempts:%d Losses:%d State:%v TimeoutMs:%d SubmittedAt:%d UpdatedAt:%d "+
		"FinishedAt:%d FinishSeq:%d Reason:%s Leases:%v CreateIndex:%d ModifyIndex:%d NotBefore:%d}",
		j.JobSpec, j.Seq, j.Attempts, j.Losses, j.State, j.TimeoutMs, j.SubmittedAt, j.UpdatedAt,
		j.FinishedAt(), j.FinishSeq(), j.Reason(), j.Leases(), j.CreateIndex, j.ModifyIndex, j.NotBefore)
}

// setEnd replaces how the job ended: a new record, never a change to the
// one copies may share; none when every field is zero.
func (j *Job) setEnd(finishedAt int64, finishSeq uint64, reason string) {
	if finishedAt == 0 && finishSeq == 0 && reason == "" {
		j.end = nil
		return
	}
	j.end = &jobEnd{finishedAt: finishedAt, finishSeq: finishSeq, reason: reason}
}

// setReason replaces why the job ended.
func (j *Job) setReason(reason string) { j.setEnd(j.FinishedAt(), j.FinishSeq(), reason) }

// timed says whether the job carries what only snapshot version 5 holds.
func (j *Job) timed() bool { return j.NotBefore != 0 || j.Retry != nil }

// Timeout is the job's execution timeout in nanoseconds, zero for none.
func (j *Job) Timeout() int64 { return int64(j.TimeoutMs) * 1e6 }

// CurrentLease returns the job's live lease, if any.
func (j Job) CurrentLease() (Lease, bool) {
	if ls := j.Leases(); len(ls) > 0 && ls[len(ls)-1].State == LeaseActive {
		return ls[len(ls)-1], true
	}
	return Lease{}, false
}

// Executions counts the job's executions that reached a report: its
// failures, and the report that ended it with another outcome (a
// non-failure report always ends the job). A lost worker or a release is
// never one. It is the attempts users see, and the LEASEHOLD_ATTEMPT of the
// execution that reports last. It is derived rather than stored, so log
// entries and snapshots written before it replay to the same state on
// every binary.
//
// A timed-out execution is counted in Attempts, as a failure is, however
// its lease ended.
func (j Job) Executions() uint32 {
	if ls := j.Leases(); len(ls) > 0 && ls[len(ls)-1].State == LeaseReported && ls[len(ls)-1].Outcome != OutcomeFailed &&
		ls[len(ls)-1].Outcome != OutcomeTimedOut {
		return j.Attempts + 1
	}
	return j.Attempts
}

func (j *Job) lastLease() *Lease {
	if ls := j.Leases(); len(ls) > 0 {
		return &ls[len(ls)-1]
	}
	return nil
}

// clone copies the job for copy-on-write: mutating the copy never touches
// the original. The state never mutates a payload, so the copy shares it.
func (j *Job) clone() *Job {
	c := *j
	c.SetLeases(append([]Lease(nil), j.Leases()...))
	return &c
}

// export returns a copy for a caller outside the package: nothing in it
// that the state may change aliases the state (the payload is copied; the
// end record and the leases' report words, never changed once set, are
// shared).
func (j *Job) export() Job {
	var none []Lease // no room: the leases' copy is an allocation of its own
	return j.exportIn(&none)
}

// exportIn is export with the copy of the job's leases taken from block's
// spare room when it has enough (a new allocation when not), and block
// grown by them. An acquire's grants share one block: a small allocation
// for each grant's copy would be garbage in the size class of the state's
// own leases, and holes between them once collected, as Go's collector
// does not move objects. The copy is capped at its length, so appending to
// it never writes into the block.
func (j *Job) exportIn(block *[]Lease) Job {
	c := *j
	c.SetLeases(nil)
	if ls := j.Leases(); len(ls) > 0 && len(ls) <= cap(*block)-len(*block) {
		start, n := len(*block), len(ls)
		*block = append(*block, ls...)
		c.SetLeases((*block)[start : start+n : start+n])
	} else if len(ls) > 0 {
		c.SetLeases(append([]Lease(nil), ls...))
	}
	c.Payload = append([]byte(nil), j.Payload...)
	return c
}

// Lease is a time-limited claim on one job by one worker. Its Token is its
// id. It is kept in its job's Leases, so it does not repeat the job's id
// (16 bytes of a record that is then 80, not 96); the queries that find a
// lease without its job return a HeldLease, which carries it.
type Lease struct {
	// Leases are compared with Equal: == would compare where their report's
	// strings are kept. This field (of no size) makes == a compile error.
	_         [0]func()
	Token     uint64
	WorkerID  string
	RequestID string // the acquire's idempotency key
	GrantedAt int64
	StartedAt int64 // zero until started
	EndedAt   int64
	State     LeaseState
	Revoke    Revoke
	// The report, for State == LeaseReported: Outcome, Retryable and Answer
	// here, and ReportID, Ref and Message behind their methods.
	Outcome Outcome
	// Retryable says the reported failure may be run again.
	Retryable bool
	// Answer is the job state the report left, returned again to a repeated
	// report.
	Answer JobState
	// words holds the report's strings, nil until the lease is reported: a
	// million live leases do not carry three empty strings each (48 bytes,
	// a third of the record). It is never mutated once set, so copies of the
	// lease may share it.
	words *reportWords
}

// Equal says whether two leases hold the same values.
func (l Lease) Equal(o Lease) bool {
	return l.Token == o.Token && l.WorkerID == o.WorkerID && l.RequestID == o.RequestID &&
		l.GrantedAt == o.GrantedAt && l.StartedAt == o.StartedAt && l.EndedAt == o.EndedAt && l.State == o.State &&
		l.Revoke == o.Revoke && l.Outcome == o.Outcome && l.Retryable == o.Retryable && l.Answer == o.Answer &&
		l.ReportID() == o.ReportID() && l.Ref() == o.Ref() && l.Message() == o.Message()
}

// String prints every field, the report's strings included (fmt alone
// would print where they are kept).
func (l Lease) String() string {
	return fmt.Sprintf("{Token:%d WorkerID:%s RequestID:%s GrantedAt:%d StartedAt:%d EndedAt:%d State:%v "+
		"Revoke:%v Outcome:%v Retryable:%t Answer:%v ReportID:%s Ref:%q Message:%q}",
		l.Token, l.WorkerID, l.RequestID, l.GrantedAt, l.StartedAt, l.EndedAt, l.State,
		l.Revoke, l.Outcome, l.Retryable, l.Answer, l.ReportID(), l.Ref(), l.Message())
}

// HeldLease is a lease with its job's id, as the queries that find leases
// by token or by worker, and a start, return them.
type HeldLease struct {
	Lease
	JobID string
}

// Equal says whether two held leases are the same lease of the same job.
func (h HeldLease) Equal(o HeldLease) bool { return h.JobID == o.JobID && h.Lease.Equal(o.Lease) }

// String prints the lease with its job's id.
func (h HeldLease) String() string { return "{JobID:" + h.JobID + " " + h.Lease.String()[1:] }

// reportWords are the strings of a lease's report.
type reportWords struct {
	reportID, ref, message string
}

// ReportID is the id of the report that ended the lease, or "".
func (l *Lease) ReportID() string {
	if l.words == nil {
		return ""
	}
	return l.words.reportID
}

// Ref is the output reference of the lease's report, or "".
func (l *Lease) Ref() string {
	if l.words == nil {
		return ""
	}
	return l.words.ref
}

// Message is the message of the lease's report, or "".
func (l *Lease) Message() string {
	if l.words == nil {
		return ""
	}
	return l.words.message
}

// setReport records the report's strings; empty ones leave nothing behind.
func (l *Lease) setReport(reportID, ref, message string) {
	if reportID == "" && ref == "" && message == "" {
		l.words = nil
		return
	}
	l.words = &reportWords{reportID: reportID, ref: ref, message: message}
}

// Worker is a registered worker.
type Worker struct {
	ID           string
	Capacity     uint32 // live leases it may hold at once
	RegisteredAt int64
	UpdatedAt    int64
	// Version is what the worker said it runs at its last registration
	// (its binary's version); empty when it did not say.
	Version string
}

// Node is a member of the cluster as the state machine knows it: where its
// Raft and API ports are.
type Node struct {
	ID        string
	RaftAddr  string
	APIAddr   string
	UpdatedAt int64
	// Level is the newest codec version the node's build applies, as the
	// leader last recorded it; 0 when never recorded (the node is taken
	// to apply BaseLevel). Version is its build's version.
	Level   uint8
	Version string
}

// LeaseRef names one lease.
type LeaseRef struct {
	JobID string
	Token uint64
}
