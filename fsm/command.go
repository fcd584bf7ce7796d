package fsm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// CommandType numbers the commands in the log. Append only: a number, once
// released, keeps its meaning forever.
type CommandType uint8

const (
	CmdRegisterWorker   CommandType = 1
	CmdDeregisterWorker CommandType = 2
	CmdSubmitJob        CommandType = 3
	CmdAcquire          CommandType = 4
	CmdStart            CommandType = 5
	CmdReport           CommandType = 6
	CmdRelease          CommandType = 7
	CmdCancel           CommandType = 8
	CmdCancelSubmitter  CommandType = 9
	CmdExpire           CommandType = 10
	CmdCompact          CommandType = 11
	CmdRaiseTokenFloor  CommandType = 12
	CmdRecordEvent      CommandType = 13
	CmdSetNode          CommandType = 14
	CmdRemoveNode       CommandType = 15
	CmdRecordEvents     CommandType = 16
	CmdAudit            CommandType = 17
	CmdRemoveIdle       CommandType = 18
	CmdRetryJob         CommandType = 19
	CmdPurgeJobs        CommandType = 20
	CmdSetQueue         CommandType = 22 // queues.go
	CmdTimeOut          CommandType = 21
	CmdPutSchedule      CommandType = 23 // schedule.go
	CmdDeleteSchedule   CommandType = 24
	CmdFireSchedule     CommandType = 25
)

// Command is one state change. Commands are plain values: the leader
// validates and encodes them, every replica decodes and applies them.
type Command interface {
	Type() CommandType
	// Validate checks every field against its rule and bound. It never
	// mutates the command.
	Validate() error
	encode(e *encoder)
	decode(d *decoder)
}

// RegisterWorker registers a worker or updates its capacity and version.
type RegisterWorker struct {
	WorkerID string
	Capacity uint32
	// Version is the worker's own (its binary's), optional. Only codec
	// version 3 carries it: an entry with one is written in version 3,
	// one without in version 2, as before.
	Version string
}

// DeregisterWorker removes a worker. Its live leases are released (each
// job queued again, no attempt or loss counted), or with Lost ended as a
// lost worker's are: as an Expire ends them (a loss counted, then by the
// job's on_worker_lost policy: run-style jobs end lost, the others are
// queued again), so a deregistered worker's run-style job never runs
// twice. Only codec version 3 carries Lost.
type DeregisterWorker struct {
	WorkerID string
	Lost     bool
}

// RemoveIdle deregisters workers the leader has not heard from for a long
// time. A listed worker that is not registered, or that holds a live lease
// (an acquire committed after the leader decided), is kept: unlike
// DeregisterWorker it never ends a lease. Reason says why, in each event.
type RemoveIdle struct {
	WorkerIDs []string
	Reason    string
}

// MaxRemoveBatch bounds RemoveIdle.
const MaxRemoveBatch = 1024

// SubmitJob submits a job, idempotently on its ID.
type SubmitJob struct {
	Spec JobSpec
	// RunAt is the leader time (unix nanoseconds) before which the job is
	// not granted; zero for now. It is when to run it, not what it is: a
	// second submit of the same spec is the same job whatever its RunAt
	// (or its spec's retry policy).
	// Only codec version 5 carries it and the spec's Retry.
	RunAt int64
	// TimeoutMs is the job's execution timeout in milliseconds (Job.TimeoutMs),
	// zero for none, else MinTimeout to MaxTimeout. Like RunAt it is not
	// part of what the job is. Only codec version 6 carries it.
	TimeoutMs uint32
}

// Acquire grants up to Max leases to a worker, picking by priority, then
// age, among queued jobs of the given queues (and kinds, if any).
type Acquire struct {
	WorkerID string
	// RequestID makes the acquire idempotent: a retry with the same id
	// returns the leases the first one granted.
	RequestID string
	Queues    []string
	Kinds     []string // empty: any kind
	Max       uint32
	// Start marks the granted leases running at once.
	Start bool
}

// Start marks a lease's job running.
type Start struct {
	WorkerID string
	JobID    string
	Token    uint64
}

// Report is a worker's final word on a lease.
type Report struct {
	WorkerID  string
	JobID     string
	Token     uint64
	ReportID  string
	Outcome   Outcome
	Retryable bool // with OutcomeFailed: requeue until MaxAttempts
	Ref       string
	Message   string
	// RetryAfter, with a retryable failure, is the worker's own delay
	// before the next attempt (nanoseconds), in place of the job's retry
	// policy: a snooze. It counts as an attempt. Only codec version 5
	// carries it.
	RetryAfter int64
}

// Release gives a lease back; the job is queued again at once and no
// attempt is counted.
//
// With Lost the worker says the execution is gone (its command vanished,
// as after a reboot): the lease ends as a lost worker's does (a loss
// counted, never an attempt; then the job's on_worker_lost policy: a
// run-style job ends lost). Only codec version 4 carries Lost.
type Release struct {
	WorkerID string
	JobID    string
	Token    uint64
	Reason   string
	Lost     bool
}

// Cancel cancels a queued job, or revokes a leased one (Kill: stop now).
type Cancel struct {
	JobID  string
	Kill   bool
	Reason string
}

// CancelSubmitter cancels up to Limit queued jobs of one submitter, oldest
// first. The result says whether more remain.
type CancelSubmitter struct {
	Submitter string
	Limit     uint32
	Reason    string
}

// Expire ends the listed leases because their worker was silent past
// toleration. A lease that is no longer current is ignored.
type Expire struct {
	Leases []LeaseRef
	Reason string
}

// TimeOut revokes the listed leases because they ran past their job's
// timeout, as the leader saw it. Apply checks each against the command's
// own time: a lease that is no longer current and live, already revoked,
// or not yet past GrantedAt + its job's timeout is ignored. A timed-out
// lease is told kill; when it ends the attempt ends timed_out and the
// job's retry policy decides. Only codec version 6 carries it.
type TimeOut struct {
	Leases []LeaseRef
}

// Compact removes terminal jobs finished before JobsBefore and events older
// than EventsBefore, at most Limit jobs per command.
type Compact struct {
	JobsBefore   int64
	EventsBefore int64
	Limit        uint32
}

// RaiseTokenFloor makes every later token larger than Floor.
type RaiseTokenFloor struct {
	Floor uint64
}

// RecordEvents records several leader observations in one entry (a batch of
// workers turning unreachable, say), so they cost one commit, not many.
type RecordEvents struct {
	Events []RecordEvent
}

// MaxRecordBatch bounds RecordEvents.
const MaxRecordBatch = 1024

// SetNode records a cluster node's addresses, so every node can tell a
// client where the leader's API is, and with Level what the node's build
// can apply (see Level): the leader proposes an entry only when every
// voter can apply it. A SetNode without Level keeps what the table says
// of the node's level and version. Only codec version 4 carries Level and
// Version.
type SetNode struct {
	NodeID   string
	RaftAddr string
	APIAddr  string
	Level    uint8  // the newest codec the node applies (and snapshot it reads); 0: unchanged
	Version  string // the node's build version, with Level
}

// RemoveNode forgets a node that left the cluster.
type RemoveNode struct {
	NodeID string
}

// Audit records an administrative action, or a refused attempt at one, with
// who asked and from where. The node that saw the action proposes it.
type Audit struct {
	Action string // what was done, e.g. "cluster.join", "auth.refused"
	Actor  string // the identity: a token's name, a certificate's subject, a node
	Source string // the caller's address
	Detail string // the target and the outcome
}

// MaxActorLen bounds Audit.Actor (a certificate identity URI is longer than an id).
const MaxActorLen = 512

// RecordEvent records a fact only the leader observes (see recordable).
type RecordEvent struct {
	Event    EventType
	WorkerID string
	Detail   string
}

// RetryJob queues a dead job again with a fresh attempt budget (its
// attempts and losses back to zero, no wait), keeping its lease history.
// A job in any other state is refused with ErrNotDead. Codec version 6.
type RetryJob struct {
	JobID  string
	Reason string
}

// PurgeJobs removes dead jobs: the listed ones (JobIDs; a listed job that
// is not dead is skipped, not removed), or else up to Limit of those of
// Queue (empty: every queue) that died more than OlderThan (nanoseconds)
// before the command's leader time (zero: whenever), oldest death first.
// The result says whether more remain. Codec version 6.
type PurgeJobs struct {
	JobIDs    []string
	Queue     string
	OlderThan int64
	Limit     uint32
	Reason    string
}

// MaxPurgeBatch bounds PurgeJobs: the ids it lists and the jobs it removes.
const MaxPurgeBatch = 1000

func (*RegisterWorker) Type() CommandType   { return CmdRegisterWorker }
func (*DeregisterWorker) Type() CommandType { return CmdDeregisterWorker }
func (*SubmitJob) Type() CommandType        { return CmdSubmitJob }
func (*Acquire) Type() CommandType          { return CmdAcquire }
func (*Start) Type() CommandType            { return CmdStart }
func (*Report) Type() CommandType           { return CmdReport }
func (*Release) Type() CommandType          { return CmdRelease }
func (*Cancel) Type() CommandType           { return CmdCancel }
func (*CancelSubmitter) Type() CommandType  { return CmdCancelSubmitter }
func (*Expire) Type() CommandType           { return CmdExpire }
func (*Compact) Type() CommandType          { return CmdCompact }
func (*RaiseTokenFloor) Type() CommandType  { return CmdRaiseTokenFloor }
func (*RecordEvent) Type() CommandType      { return CmdRecordEvent }
func (*SetNode) Type() CommandType          { return CmdSetNode }
func (*RemoveNode) Type() CommandType       { return CmdRemoveNode }
func (*RecordEvents) Type() CommandType     { return CmdRecordEvents }
func (*Audit) Type() CommandType            { return CmdAudit }
func (*RemoveIdle) Type() CommandType       { return CmdRemoveIdle }
func (*RetryJob) Type() CommandType         { return CmdRetryJob }
func (*PurgeJobs) Type() CommandType        { return CmdPurgeJobs }
func (*TimeOut) Type() CommandType          { return CmdTimeOut }

// --- validation ---

func (c *RegisterWorker) Validate() error {
	if err := checkID("worker_id", c.WorkerID); err != nil {
		return err
	}
	if c.Capacity == 0 {
		return invalid("capacity", "must be at least 1")
	}
	if c.Capacity > MaxCapacity {
		return invalid("capacity", "%d exceeds %d", c.Capacity, MaxCapacity)
	}
	return checkVersion("version", c.Version)
}

func (c *DeregisterWorker) Validate() error { return checkID("worker_id", c.WorkerID) }

func (c *RemoveIdle) Validate() error {
	if len(c.WorkerIDs) == 0 {
		return invalid("worker_ids", "name at least one worker")
	}
	if len(c.WorkerIDs) > MaxRemoveBatch {
		return tooLarge("worker_ids", len(c.WorkerIDs), MaxRemoveBatch)
	}
	for _, id := range c.WorkerIDs {
		if err := checkID("worker_ids", id); err != nil {
			return err
		}
	}
	return checkText("reason", c.Reason, MaxMessageLen)
}

func (c *SubmitJob) Validate() error {
	if c.RunAt < 0 {
		return invalid("run_at", "must not be before 1970")
	}
	if err := c.checkTimeout(); err != nil {
		return err
	}
	return c.Spec.Validate()
}

func (c *SubmitJob) checkTimeout() error {
	if c.TimeoutMs != 0 && (c.TimeoutMs < MinTimeout || c.TimeoutMs > MaxTimeout) {
		return invalid("spec.timeout", "must be 0 (none) or %s to %s", time.Duration(MinTimeout)*time.Millisecond,
			time.Duration(MaxTimeout)*time.Millisecond)
	}
	return nil
}

// Validate checks a job spec. It never fills defaults: the API does that.
// Fields are named as in the API's SubmitJobRequest.
func (s *JobSpec) Validate() error {
	if err := checkID("spec.id", s.ID); err != nil {
		return err
	}
	if err := checkName("spec.queue", s.Queue); err != nil {
		return err
	}
	if err := checkName("spec.kind", s.Kind); err != nil {
		return err
	}
	if err := checkPayload("spec.payload", s.Payload); err != nil {
		return err
	}
	if err := checkOptionalID("spec.submitter", s.Submitter); err != nil {
		return err
	}
	if err := checkRange("spec.max_attempts", uint64(s.MaxAttempts), 1, MaxAttempts); err != nil {
		return err
	}
	if _, ok := lostPolicyNames[s.OnWorkerLost]; !ok {
		return invalid("spec.on_worker_lost", "unknown policy %d", s.OnWorkerLost)
	}
	if err := checkRange("spec.max_worker_losses", uint64(s.MaxWorkerLosses), 1, MaxAttempts); err != nil {
		return err
	}
	return s.Retry.validate()
}

// validate checks a retry policy; nil is valid (no delay).
func (p *RetryPolicy) validate() error {
	if p == nil {
		return nil
	}
	if p.Initial <= 0 || p.Initial > MaxRetryDelay {
		return invalid("spec.retry.initial", "must be more than 0 and at most %s", time.Duration(MaxRetryDelay))
	}
	if p.Max < p.Initial || p.Max > MaxRetryDelay {
		return invalid("spec.retry.max", "must be at least the initial delay and at most %s", time.Duration(MaxRetryDelay))
	}
	if err := checkRange("spec.retry.multiplier", uint64(p.Multiplier), 1000, MaxRetryMultiplier); err != nil {
		return err
	}
	return checkRange("spec.retry.jitter", uint64(p.Jitter), 0, 100)
}

func (c *Acquire) Validate() error {
	if err := checkID("worker_id", c.WorkerID); err != nil {
		return err
	}
	if err := checkID("request_id", c.RequestID); err != nil {
		return err
	}
	if len(c.Queues) == 0 {
		return invalid("queues", "name at least one queue")
	}
	if err := checkNames("queues", c.Queues); err != nil {
		return err
	}
	if err := checkNames("kinds", c.Kinds); err != nil {
		return err
	}
	if c.Max == 0 {
		return invalid("max", "must be at least 1")
	}
	if c.Max > MaxAcquireBatch {
		return tooLarge("max", int(c.Max), MaxAcquireBatch)
	}
	return nil
}

func checkLeaseAction(worker, job string, token uint64) error {
	if err := checkID("worker_id", worker); err != nil {
		return err
	}
	if err := checkID("job_id", job); err != nil {
		return err
	}
	return checkToken("token", token)
}

func (c *Start) Validate() error { return checkLeaseAction(c.WorkerID, c.JobID, c.Token) }

func (c *Report) Validate() error {
	if err := checkLeaseAction(c.WorkerID, c.JobID, c.Token); err != nil {
		return err
	}
	if err := checkID("report_id", c.ReportID); err != nil {
		return err
	}
	if _, ok := outcomeNames[c.Outcome]; !ok {
		return invalid("outcome", "unknown outcome %d", c.Outcome)
	}
	if c.Outcome == OutcomeTimedOut {
		return invalid("outcome", "timed_out is the leader's verdict, not a worker's")
	}
	if c.Retryable && c.Outcome != OutcomeFailed {
		return invalid("retryable", "only a failed outcome can be retryable")
	}
	if err := checkText("ref", c.Ref, MaxRefLen); err != nil {
		return err
	}
	if c.RetryAfter < 0 || c.RetryAfter > MaxRetryDelay {
		return invalid("retry_after", "must be 0 to %s", time.Duration(MaxRetryDelay))
	}
	if c.RetryAfter > 0 && !c.Retryable {
		return invalid("retry_after", "only a retryable failure is retried after a delay")
	}
	return checkText("message", c.Message, MaxMessageLen)
}

func (c *Release) Validate() error {
	if err := checkLeaseAction(c.WorkerID, c.JobID, c.Token); err != nil {
		return err
	}
	return checkText("reason", c.Reason, MaxMessageLen)
}

func (c *Cancel) Validate() error {
	if err := checkID("job_id", c.JobID); err != nil {
		return err
	}
	return checkText("reason", c.Reason, MaxMessageLen)
}

func (c *CancelSubmitter) Validate() error {
	if err := checkID("submitter", c.Submitter); err != nil {
		return err
	}
	if err := checkRange("limit", uint64(c.Limit), 1, MaxCancelBatch); err != nil {
		return err
	}
	return checkText("reason", c.Reason, MaxMessageLen)
}

func (c *Expire) Validate() error {
	if err := checkRefs(c.Leases, MaxExpireBatch); err != nil {
		return err
	}
	return checkText("reason", c.Reason, MaxMessageLen)
}

func (c *TimeOut) Validate() error { return checkRefs(c.Leases, MaxTimeOutBatch) }

// checkRefs checks a command's list of leases: one to max of them.
func checkRefs(refs []LeaseRef, max int) error {
	if len(refs) == 0 {
		return invalid("leases", "name at least one lease")
	}
	if len(refs) > max {
		return tooLarge("leases", len(refs), max)
	}
	for _, l := range refs {
		if err := checkID("leases.job_id", l.JobID); err != nil {
			return err
		}
		if err := checkToken("leases.token", l.Token); err != nil {
			return err
		}
	}
	return nil
}

func (c *Compact) Validate() error {
	return checkRange("limit", uint64(c.Limit), 1, MaxCompactBatch)
}

func (c *RaiseTokenFloor) Validate() error {
	if c.Floor > MaxTokenFloor {
		return invalid("floor", "%d exceeds %d", c.Floor, uint64(MaxTokenFloor))
	}
	return nil
}

func (c *RecordEvent) Validate() error {
	if !recordable[c.Event] {
		return invalid("event", "event type %s cannot be recorded directly", c.Event)
	}
	if err := checkOptionalID("worker_id", c.WorkerID); err != nil {
		return err
	}
	return checkText("detail", c.Detail, MaxMessageLen)
}

func (c *Audit) Validate() error {
	if err := checkName("action", c.Action); err != nil {
		return err
	}
	if err := checkText("actor", c.Actor, MaxActorLen); err != nil {
		return err
	}
	if err := checkText("source", c.Source, MaxAddrLen); err != nil {
		return err
	}
	return checkText("detail", c.Detail, MaxMessageLen)
}

func (c *SetNode) Validate() error {
	if err := checkID("node_id", c.NodeID); err != nil {
		return err
	}
	if err := checkAddr("raft_addr", c.RaftAddr); err != nil {
		return err
	}
	if err := checkAddr("api_addr", c.APIAddr); err != nil {
		return err
	}
	if c.Level != 0 || c.Version != "" { // a version comes with a level
		if err := checkRange("level", uint64(c.Level), codecV2, math.MaxUint8); err != nil {
			return err
		}
	}
	return checkVersion("version", c.Version)
}

func (c *RemoveNode) Validate() error { return checkID("node_id", c.NodeID) }

func (c *RetryJob) Validate() error {
	if err := checkID("job_id", c.JobID); err != nil {
		return err
	}
	return checkText("reason", c.Reason, MaxMessageLen)
}

func (c *PurgeJobs) Validate() error {
	if len(c.JobIDs) > MaxPurgeBatch {
		return tooLarge("ids", len(c.JobIDs), MaxPurgeBatch)
	}
	for _, id := range c.JobIDs {
		if err := checkID("ids", id); err != nil {
			return err
		}
	}
	if len(c.JobIDs) > 0 && (c.Queue != "" || c.OlderThan != 0) {
		return invalid("ids", "purge by ids, or by queue and age, not both")
	}
	if c.Queue != "" {
		if err := checkName("queue", c.Queue); err != nil {
			return err
		}
	}
	if c.OlderThan < 0 || c.OlderThan > MaxPurgeAge {
		return invalid("older_than", "must be 0 to %d days", MaxPurgeAge/int64(24*time.Hour))
	}
	if err := checkRange("limit", uint64(c.Limit), 1, MaxPurgeBatch); err != nil {
		return err
	}
	return checkText("reason", c.Reason, MaxMessageLen)
}

// MaxPurgeAge bounds PurgeJobs.OlderThan: a hundred years.
const MaxPurgeAge = int64(100 * 365 * 24 * time.Hour)

func (c *RecordEvents) Validate() error {
	if len(c.Events) == 0 {
		return invalid("events", "name at least one event")
	}
	if len(c.Events) > MaxRecordBatch {
		return tooLarge("events", len(c.Events), MaxRecordBatch)
	}
	for i := range c.Events {
		if err := c.Events[i].Validate(); err != nil {
			return err
		}
	}
	return nil
}

// --- encoding: fields in declaration order ---

func (c *RegisterWorker) encode(e *encoder) {
	e.str(c.WorkerID)
	e.uvarint(uint64(c.Capacity))
	if e.codec >= codecV3 {
		e.str(c.Version)
	}
}

func (c *RegisterWorker) decode(d *decoder) {
	c.WorkerID = d.heldStr(keptWorker, MaxIDLen)
	c.Capacity = d.u32()
	if d.codec >= codecV3 {
		c.Version = d.str(MaxVersionLen)
	}
}

// codecVersion is the oldest codec version that carries the command
// whole, the one Encode writes it in: a worker's version needs 3.
func (c *RegisterWorker) codecVersion() byte {
	if c.Version != "" {
		return codecV3
	}
	return codecV2
}

func (c *DeregisterWorker) encode(e *encoder) {
	e.str(c.WorkerID)
	if e.codec >= codecV3 {
		e.bool(c.Lost)
	}
}

func (c *DeregisterWorker) decode(d *decoder) {
	c.WorkerID = d.heldStr(keptWorker, MaxIDLen)
	if d.codec >= codecV3 {
		c.Lost = d.bool()
	}
}

func (c *DeregisterWorker) codecVersion() byte {
	if c.Lost {
		return codecV3
	}
	return codecV2
}

func (c *RemoveIdle) encode(e *encoder) { e.strs(c.WorkerIDs); e.str(c.Reason) }
func (c *RemoveIdle) decode(d *decoder) {
	c.WorkerIDs = d.strs(keptWorker, MaxRemoveBatch, MaxIDLen)
	c.Reason = d.str(MaxMessageLen)
}

func (c *SubmitJob) encode(e *encoder) {
	encodeSpec(e, &c.Spec)
	if e.codec >= codecV5 {
		encodeRetry(e, c.Spec.Retry)
		e.varint(c.RunAt)
	}
	if e.codec >= codecV6 {
		e.uvarint(uint64(c.TimeoutMs))
	}
}

func (c *SubmitJob) decode(d *decoder) {
	decodeSpec(d, &c.Spec)
	if d.codec >= codecV5 {
		c.Spec.Retry = decodeRetry(d)
		c.RunAt = d.varint()
	}
	if d.codec >= codecV6 {
		c.TimeoutMs = d.u32()
	}
}

func (c *SubmitJob) codecVersion() byte {
	if c.TimeoutMs != 0 {
		return codecV6
	}
	if c.Spec.Retry != nil || c.RunAt != 0 {
		return codecV5
	}
	return codecV2
}

// encodeRetry writes a presence byte, then the policy.
func encodeRetry(e *encoder, p *RetryPolicy) {
	e.bool(p != nil)
	if p != nil {
		e.varint(p.Initial)
		e.varint(p.Max)
		e.uvarint(uint64(p.Multiplier))
		e.uvarint(uint64(p.Jitter))
	}
}

func decodeRetry(d *decoder) *RetryPolicy {
	if !d.bool() {
		return nil
	}
	return &RetryPolicy{Initial: d.varint(), Max: d.varint(), Multiplier: d.u32(), Jitter: d.u32()}
}

func encodeSpec(e *encoder, s *JobSpec) {
	e.str(s.ID)
	e.str(s.Queue)
	e.str(s.Kind)
	e.bytes(s.Payload)
	e.varint(int64(s.Priority))
	e.str(s.Submitter)
	e.uvarint(uint64(s.MaxAttempts))
	e.byte1(uint8(s.OnWorkerLost))
	e.uvarint(uint64(s.MaxWorkerLosses))
}

func decodeSpec(d *decoder, s *JobSpec) {
	s.ID = d.str(MaxIDLen)
	s.Queue = d.keptStr(keptQueue, MaxNameLen)
	s.Kind = d.keptStr(keptKind, MaxNameLen)
	s.Payload = d.bytes(MaxPayloadLen)
	s.Priority = d.i32()
	s.Submitter = d.keptStr(keptSubmitter, MaxIDLen)
	s.MaxAttempts = d.u32()
	s.OnWorkerLost = LostPolicy(d.byte1())
	s.MaxWorkerLosses = d.u32()
}

func (c *Acquire) encode(e *encoder) {
	e.str(c.WorkerID)
	e.str(c.RequestID)
	e.strs(c.Queues)
	e.strs(c.Kinds)
	e.uvarint(uint64(c.Max))
	e.bool(c.Start)
}

func (c *Acquire) decode(d *decoder) {
	c.WorkerID = d.heldStr(keptWorker, MaxIDLen)
	c.RequestID = d.str(MaxIDLen)
	c.Queues = d.strs(keptQueue, MaxSelectors, MaxNameLen)
	c.Kinds = d.strs(keptKind, MaxSelectors, MaxNameLen)
	c.Max = d.u32()
	c.Start = d.bool()
}

func (c *Start) encode(e *encoder) { e.str(c.WorkerID); e.str(c.JobID); e.uvarint(c.Token) }
func (c *Start) decode(d *decoder) {
	c.WorkerID = d.heldStr(keptWorker, MaxIDLen)
	c.JobID = d.heldStr(heldJob, MaxIDLen)
	c.Token = d.uvarint()
}

func (c *Report) encode(e *encoder) {
	e.str(c.WorkerID)
	e.str(c.JobID)
	e.uvarint(c.Token)
	e.str(c.ReportID)
	e.byte1(uint8(c.Outcome))
	e.bool(c.Retryable)
	e.str(c.Ref)
	e.str(c.Message)
	if e.codec >= codecV5 {
		e.varint(c.RetryAfter)
	}
}

func (c *Report) decode(d *decoder) {
	c.WorkerID = d.heldStr(keptWorker, MaxIDLen)
	c.JobID = d.heldStr(heldJob, MaxIDLen)
	c.Token = d.uvarint()
	c.ReportID = d.str(MaxIDLen)
	c.Outcome = Outcome(d.byte1())
	c.Retryable = d.bool()
	c.Ref = d.str(MaxRefLen)
	c.Message = d.str(MaxMessageLen)
	if d.codec >= codecV5 {
		c.RetryAfter = d.varint()
	}
}

func (c *Report) codecVersion() byte {
	if c.RetryAfter != 0 {
		return codecV5
	}
	return codecV2
}

func (c *Release) encode(e *encoder) {
	e.str(c.WorkerID)
	e.str(c.JobID)
	e.uvarint(c.Token)
	e.str(c.Reason)
	if e.codec >= codecV4 {
		e.bool(c.Lost)
	}
}

func (c *Release) decode(d *decoder) {
	c.WorkerID = d.heldStr(keptWorker, MaxIDLen)
	c.JobID = d.heldStr(heldJob, MaxIDLen)
	c.Token = d.uvarint()
	c.Reason = d.str(MaxMessageLen)
	if d.codec >= codecV4 {
		c.Lost = d.bool()
	}
}

func (c *Release) codecVersion() byte {
	if c.Lost {
		return codecV4
	}
	return codecV2
}

func (c *Cancel) encode(e *encoder) { e.str(c.JobID); e.bool(c.Kill); e.str(c.Reason) }
func (c *Cancel) decode(d *decoder) {
	c.JobID = d.heldStr(heldJob, MaxIDLen)
	c.Kill = d.bool()
	c.Reason = d.str(MaxMessageLen)
}

func (c *CancelSubmitter) encode(e *encoder) {
	e.str(c.Submitter)
	e.uvarint(uint64(c.Limit))
	e.str(c.Reason)
}

func (c *CancelSubmitter) decode(d *decoder) {
	c.Submitter = d.str(MaxIDLen)
	c.Limit = d.u32()
	c.Reason = d.str(MaxMessageLen)
}

func (c *Expire) encode(e *encoder) {
	encodeRefs(e, c.Leases)
	e.str(c.Reason)
}

func (c *Expire) decode(d *decoder) {
	c.Leases = decodeRefs(d, MaxExpireBatch)
	c.Reason = d.str(MaxMessageLen)
}

func encodeRefs(e *encoder, refs []LeaseRef) {
	e.uvarint(uint64(len(refs)))
	for _, l := range refs {
		e.str(l.JobID)
		e.uvarint(l.Token)
	}
}

func decodeRefs(d *decoder, max int) []LeaseRef {
	n := d.count(max)
	if n == 0 {
		return nil
	}
	refs := make([]LeaseRef, n)
	for i := range refs {
		refs[i] = LeaseRef{JobID: d.heldStr(heldJob, MaxIDLen), Token: d.uvarint()}
	}
	return refs
}

func (c *TimeOut) encode(e *encoder) { encodeRefs(e, c.Leases) }
func (c *TimeOut) decode(d *decoder) { c.Leases = decodeRefs(d, MaxTimeOutBatch) }

func (*TimeOut) codecVersion() byte { return codecV6 }

func (c *Compact) encode(e *encoder) {
	e.varint(c.JobsBefore)
	e.varint(c.EventsBefore)
	e.uvarint(uint64(c.Limit))
}

func (c *Compact) decode(d *decoder) {
	c.JobsBefore = d.varint()
	c.EventsBefore = d.varint()
	c.Limit = d.u32()
}

func (c *RaiseTokenFloor) encode(e *encoder) { e.uvarint(c.Floor) }
func (c *RaiseTokenFloor) decode(d *decoder) { c.Floor = d.uvarint() }

func (c *RecordEvent) encode(e *encoder) { e.byte1(uint8(c.Event)); e.str(c.WorkerID); e.str(c.Detail) }
func (c *RecordEvent) decode(d *decoder) {
	c.Event = EventType(d.byte1())
	c.WorkerID = d.heldStr(keptWorker, MaxIDLen)
	c.Detail = d.str(MaxMessageLen)
}

func (c *SetNode) encode(e *encoder) {
	e.str(c.NodeID)
	e.str(c.RaftAddr)
	e.str(c.APIAddr)
	if e.codec >= codecV4 {
		e.byte1(c.Level)
		e.str(c.Version)
	}
}

func (c *SetNode) decode(d *decoder) {
	c.NodeID = d.str(MaxIDLen)
	c.RaftAddr = d.str(MaxAddrLen)
	c.APIAddr = d.str(MaxAddrLen)
	if d.codec >= codecV4 {
		c.Level = d.byte1()
		c.Version = d.str(MaxVersionLen)
	}
}

func (c *SetNode) codecVersion() byte {
	if c.Level != 0 {
		return codecV4
	}
	return codecV2
}

func (c *RecordEvents) encode(e *encoder) {
	e.uvarint(uint64(len(c.Events)))
	for i := range c.Events {
		c.Events[i].encode(e)
	}
}

func (c *RecordEvents) decode(d *decoder) {
	if n := d.count(MaxRecordBatch); n > 0 {
		c.Events = make([]RecordEvent, n)
		for i := range c.Events {
			c.Events[i].decode(d)
		}
	}
}

func (c *Audit) encode(e *encoder) { e.str(c.Action); e.str(c.Actor); e.str(c.Source); e.str(c.Detail) }
func (c *Audit) decode(d *decoder) {
	c.Action = d.str(MaxNameLen)
	c.Actor = d.str(MaxActorLen)
	c.Source = d.str(MaxAddrLen)
	c.Detail = d.str(MaxMessageLen)
}

func (c *RetryJob) encode(e *encoder) { e.str(c.JobID); e.str(c.Reason) }
func (c *RetryJob) decode(d *decoder) {
	c.JobID = d.str(MaxIDLen)
	c.Reason = d.str(MaxMessageLen)
}
func (*RetryJob) codecVersion() byte { return codecV6 }

func (c *PurgeJobs) encode(e *encoder) {
	e.strs(c.JobIDs)
	e.str(c.Queue)
	e.varint(c.OlderThan)
	e.uvarint(uint64(c.Limit))
	e.str(c.Reason)
}

func (c *PurgeJobs) decode(d *decoder) {
	c.JobIDs = d.strs(heldJob, MaxPurgeBatch, MaxIDLen)
	c.Queue = d.str(MaxNameLen)
	c.OlderThan = d.varint()
	c.Limit = d.u32()
	c.Reason = d.str(MaxMessageLen)
}

func (*PurgeJobs) codecVersion() byte { return codecV6 }

func (c *RemoveNode) encode(e *encoder) { e.str(c.NodeID) }
func (c *RemoveNode) decode(d *decoder) { c.NodeID = d.str(MaxIDLen) }

// --- envelope ---

// The first byte of every encoded command is its codec version. Version 2
// ends with a CRC-32C (Castagnoli) of every byte before it, so an entry
// damaged on disk, in memory or on the way is refused as corrupt rather
// than applied. Version 1, the logs written before, has no checksum and
// still decodes. Version 3 is version 2 with fields added at the end of
// some commands (RegisterWorker's Version, DeregisterWorker's Lost); version
// 4 adds SetNode's Level and Version and Release's Lost; 5 adds
// SubmitJob's RunAt and the spec's Retry, and Report's RetryAfter; 6 adds
// RetryJob, PurgeJobs (and, by level, the dead state), SetQueue, SubmitJob's TimeoutMs, the
// TimeOut command and the schedule commands (PutSchedule, DeleteSchedule, FireSchedule).
// Encode writes each command in
// the oldest version that carries it whole (versioned), so a command
// without a new field is written byte for byte as before, and a binary
// from before version 3 stops only at an entry that needs it.
const (
	codecV1     = 1
	codecV2     = 2
	codecV3     = 3
	codecV4     = 4
	codecV5     = 5
	codecV6     = 6
	checksumLen = 4
)

// Level is the newest codec version this build applies, and the newest
// snapshot version it reads: what a node publishes, so that the leader
// proposes an entry only when every voter can apply it (CodecOf).
const Level = codecV6

// BaseLevel is the level of a node that does not say: every build since
// entries carry checksums applies version 2.
const BaseLevel = codecV2

// CodecOf is the codec version an entry of c is written in: only a node
// whose level is at least this applies it.
func CodecOf(c Command) uint8 { return codecOf(c) }

// versioned is a command that may need a codec version above 2.
type versioned interface {
	codecVersion() byte
}

// codecOf is the version Encode writes c in.
func codecOf(c Command) byte {
	if v, ok := c.(versioned); ok {
		return v.codecVersion()
	}
	return codecV2
}

// commandFactories builds an empty command of each type. Registration
// panics on a duplicate so two types can never share a number.
var commandFactories = map[CommandType]func() Command{}

func registerCommand(f func() Command) {
	t := f().Type()
	if _, dup := commandFactories[t]; dup {
		panic(fmt.Sprintf("fsm: command type %d registered twice", t))
	}
	commandFactories[t] = f
}

func init() {
	registerCommand(func() Command { return new(RegisterWorker) })
	registerCommand(func() Command { return new(DeregisterWorker) })
	registerCommand(func() Command { return new(SubmitJob) })
	registerCommand(func() Command { return new(Acquire) })
	registerCommand(func() Command { return new(Start) })
	registerCommand(func() Command { return new(Report) })
	registerCommand(func() Command { return new(Release) })
	registerCommand(func() Command { return new(Cancel) })
	registerCommand(func() Command { return new(CancelSubmitter) })
	registerCommand(func() Command { return new(Expire) })
	registerCommand(func() Command { return new(Compact) })
	registerCommand(func() Command { return new(RaiseTokenFloor) })
	registerCommand(func() Command { return new(RecordEvent) })
	registerCommand(func() Command { return new(SetNode) })
	registerCommand(func() Command { return new(RemoveNode) })
	registerCommand(func() Command { return new(RecordEvents) })
	registerCommand(func() Command { return new(Audit) })
	registerCommand(func() Command { return new(RemoveIdle) })
	registerCommand(func() Command { return new(RetryJob) })
	registerCommand(func() Command { return new(PurgeJobs) })
	registerCommand(func() Command { return new(TimeOut) })
}

// Envelope is a decoded log entry: the command and the time the leader
// stamped on it.
type Envelope struct {
	// Time is the leader's clock when it proposed the command, unix
	// nanoseconds. It is the only time the state machine ever sees.
	Time    int64
	Command Command
}

// Encode validates a command and encodes it with its time. Nothing that
// fails validation is ever encoded.
func Encode(time int64, c Command) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// 256 bytes hold a worker's commands without growing: one allocation
	// each. A report or an acquire with the bench's ids is 90 to 100 bytes
	// (it outgrew the 64 this started with); longer ids and a report's
	// message fit too.
	e := encoder{b: make([]byte, 0, 256), codec: codecOf(c)}
	e.byte1(e.codec)
	e.byte1(uint8(c.Type()))
	e.varint(time)
	c.encode(&e)
	return binary.LittleEndian.AppendUint32(e.b, crc32.Checksum(e.b, castagnoli)), nil
}

// VerifyChecksum checks a version 2, 3 or 4 entry's checksum without decoding the
// command, so a log store can check every entry it reads from disk for the
// price of a CRC. Entries of other versions pass: version 1 has none, and
// Decode refuses versions it does not know.
func VerifyChecksum(b []byte) error {
	_, err := checkedBody(b)
	return err
}

// checkedBody returns the entry without its checksum, after checking it.
func checkedBody(b []byte) ([]byte, error) {
	if len(b) == 0 || b[0] < codecV2 || b[0] > Level {
		return b, nil
	}
	n := len(b) - checksumLen
	if n < 1 {
		return nil, fmt.Errorf("%w: truncated: %d bytes", ErrCorrupt, len(b))
	}
	stored, computed := binary.LittleEndian.Uint32(b[n:]), crc32.Checksum(b[:n], castagnoli)
	if stored != computed {
		return nil, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, stored, computed)
	}
	return b[:n], nil
}

// Decode checks, decodes and validates one log entry. An unknown command
// type is ErrUnknownCommand; a checksum that does not match, or anything
// else that does not decode to a valid command, is ErrCorrupt.
func Decode(b []byte) (Envelope, error) { return decodeFor(b, nil) }

// decodeFor is Decode for an entry about to be applied to s (nil: none):
// names and ids s holds are read as its copies (decoder.heldStr). s must
// not change while it runs.
func decodeFor(b []byte, s *state) (Envelope, error) {
	body, err := checkedBody(b)
	if err != nil {
		return Envelope{}, err
	}
	return decodeBody(new(decoder), body, s)
}

// decodeBody is decodeFor of an entry whose checksum checkedBody passed,
// read with d, which it resets (the commands' decode methods take it
// through an interface, so a decoder of its own would be allocated on
// every call: FSM.Apply passes the one it keeps).
func decodeBody(d *decoder, body []byte, s *state) (Envelope, error) {
	*d = decoder{b: body, known: s}
	defer func() { *d = decoder{} }() // keeps neither the entry nor the state
	if d.codec = d.byte1(); d.err == nil && (d.codec < codecV1 || d.codec > Level) {
		return Envelope{}, fmt.Errorf("%w: codec version %d (written by a newer leasehold?)", ErrCorrupt, d.codec)
	}
	t := CommandType(d.byte1())
	if d.err != nil {
		return Envelope{}, d.err
	}
	factory, ok := commandFactories[t]
	if !ok {
		return Envelope{}, fmt.Errorf("%w: %d", ErrUnknownCommand, t)
	}
	env := Envelope{Time: d.varint(), Command: factory()}
	env.Command.decode(d)
	if err := d.done(); err != nil {
		return Envelope{}, err
	}
	if err := env.Command.Validate(); err != nil {
		// %v, not %w: a corrupt entry must not also look like a refusal.
		return Envelope{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return env, nil
}
