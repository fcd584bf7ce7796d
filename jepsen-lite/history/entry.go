package history

import "fmt"

// FormatVersion is the version of the format this package reads and
// writes; a run entry carries it. It changes only when a field changes
// meaning: adding an optional field keeps it.
const FormatVersion = 1

// Kind tags an Entry and says which of its payload fields is set.
type Kind string

// Entry kinds. doc.go describes each one and its fields.
const (
	KindRun           Kind = "run"
	KindRunEnd        Kind = "run_end"
	KindInvoke        Kind = "invoke"
	KindComplete      Kind = "complete"
	KindExecStart     Kind = "exec_start"
	KindExecStop      Kind = "exec_stop"
	KindSinkWrite     Kind = "sink_write"
	KindFaultStart    Kind = "fault_start"
	KindFaultStop     Kind = "fault_stop"
	KindFinalState    Kind = "final_state"
	KindClusterEvent  Kind = "cluster_event"
	KindHeal          Kind = "heal"
	KindLeaderElected Kind = "leader_elected"
	KindWorkerGone    Kind = "worker_gone"
	// The outsider nemesis: its attempts on the nodes' peer ports, and the
	// connections its capture server received.
	KindOutsiderAttempt Kind = "outsider_attempt"
	KindOutsiderCapture Kind = "outsider_capture"
	// A node seen ready again after a disk fault freed its disk.
	KindNodeReady Kind = "node_ready"
	// One call of the flood, a hostile client beside the real load.
	KindFloodCall Kind = "flood_call"
)

// Kinds lists every kind, in the order doc.go describes them.
func Kinds() []Kind {
	return []Kind{
		KindRun, KindRunEnd, KindInvoke, KindComplete, KindExecStart, KindExecStop,
		KindSinkWrite, KindFaultStart, KindFaultStop, KindFinalState, KindClusterEvent,
		KindHeal, KindLeaderElected, KindWorkerGone, KindOutsiderAttempt, KindOutsiderCapture,
		KindNodeReady, KindFloodCall,
	}
}

// Entry is one line of a history: a tagged union. Kind says which one
// payload pointer is set (none for heal); every entry has Ns.
type Entry struct {
	// Seq is the recorder's order of appending, from 1. Entries merged
	// from several recorders may repeat a Seq; nothing depends on it
	// but reading order.
	Seq  int64 `json:"seq,omitempty"`
	Kind Kind  `json:"kind"`
	// Ns is when the entry's event happened, in CLOCK_MONOTONIC
	// nanoseconds (Now): the call for an invoke, the answer for a
	// complete, the observation for everything observed.
	Ns int64 `json:"ns"`
	// Process names who acted: the client or worker making a call, the
	// worker process running a job, the nemesis. Fault targets use the
	// same names.
	Process string `json:"process,omitempty"`

	Run    *Run          `json:"run,omitempty"`
	RunEnd *RunEnd       `json:"run_end,omitempty"`
	Op     *Op           `json:"op,omitempty"`
	Exec   *Exec         `json:"exec,omitempty"`
	Sink   *SinkWrite    `json:"sink,omitempty"`
	Fault  *Fault        `json:"fault,omitempty"`
	Final  *FinalState   `json:"final,omitempty"`
	Event  *ClusterEvent `json:"event,omitempty"`
	Marker *Marker       `json:"marker,omitempty"`

	Attempt *Attempt `json:"attempt,omitempty"`
	Capture *Capture `json:"capture,omitempty"`

	Flood *FloodCall `json:"flood,omitempty"`
}

// Run opens a history: the cluster's settings as the runner configured
// them. Checkers take their time bounds from here unless told otherwise.
type Run struct {
	Format            int      `json:"format"`
	Name              string   `json:"name,omitempty"`
	Seed              int64    `json:"seed,omitempty"`
	Nodes             []string `json:"nodes,omitempty"`
	Workers           []string `json:"workers,omitempty"`
	Nemeses           []string `json:"nemeses,omitempty"`
	RenewNs           int64    `json:"renew_ns,omitempty"`
	GraceNs           int64    `json:"grace_ns,omitempty"`
	TolerationNs      int64    `json:"toleration_ns,omitempty"`
	ElectionTimeoutNs int64    `json:"election_timeout_ns,omitempty"`
	// HeartbeatTimeoutNs is Raft's: with the election timeout it bounds
	// how often a node can start an election.
	HeartbeatTimeoutNs int64 `json:"heartbeat_timeout_ns,omitempty"`
	// Members are the nodes as configured: the membership every node must
	// still have at the end.
	Members []Member `json:"members,omitempty"`
	// Secure: the peer port runs mutual TLS and the API wants tokens.
	Secure bool `json:"secure,omitempty"`
	// FloodSource is the address the flood calls from; empty: the run
	// has no flood.
	FloodSource string `json:"flood_source,omitempty"`
	// Unrecorded are workers whose API calls the history does not hold:
	// shell workers (`leasehold worker run`), whose commands record their
	// executions but whose acquires, heartbeats and reports go unseen.
	Unrecorded []string `json:"unrecorded,omitempty"`
}

// Member is one node of a cluster's membership: its id and addresses.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
	Voter    bool   `json:"voter,omitempty"`
}

// RunEnd closes a history.
type RunEnd struct {
	// EventsComplete: the runner read the cluster's event log without a
	// gap (no truncation) from its first event to LastEventSeq. Checks
	// that need an event for every refusal or every lease end run only
	// then.
	EventsComplete bool   `json:"events_complete"`
	LastEventSeq   uint64 `json:"last_event_seq,omitempty"`
}

// Status is how a call ended.
type Status string

const (
	// StatusOK: the call succeeded; Output holds the answer.
	StatusOK Status = "ok"
	// StatusFail: a definite refusal; the call changed nothing (save the
	// event a refusal records). Reason is the API's reason code.
	StatusFail Status = "fail"
	// StatusInfo: the outcome is unknown (a timeout, a lost connection,
	// OUTCOME_UNKNOWN): the call may take effect at any time after it
	// was invoked, or never.
	StatusInfo Status = "info"
)

// Operation names.
const (
	OpSubmit          = "submit"
	OpAcquire         = "acquire"
	OpStart           = "start"
	OpHeartbeat       = "heartbeat"
	OpReport          = "report"
	OpRelease         = "release"
	OpCancel          = "cancel"
	OpKill            = "kill"
	OpCancelSubmitter = "cancel_submitter"
	OpGetJob          = "get_job"
	OpGetLease        = "get_lease"
	OpFenceCheck      = "fence_check"
	OpListLeases      = "list_leases"
	OpRegister        = "register"
	OpDeregister      = "deregister"
)

// Op is one half of a call: an invoke carries ID, Name and Input; its
// complete carries ID, Name, Status, Reason and Output. The pair is
// matched by (Entry.Process, ID).
type Op struct {
	ID     uint64  `json:"op_id"`
	Name   string  `json:"op"`
	Input  *Input  `json:"input,omitempty"`
	Status Status  `json:"status,omitempty"`
	Reason string  `json:"reason,omitempty"`
	Output *Output `json:"output,omitempty"`
}

// Input holds a call's arguments; each op uses the fields doc.go lists.
type Input struct {
	JobID     string     `json:"job_id,omitempty"`
	Token     uint64     `json:"token,omitempty"`
	WorkerID  string     `json:"worker_id,omitempty"`
	RequestID string     `json:"request_id,omitempty"`
	ReportID  string     `json:"report_id,omitempty"`
	Outcome   Outcome    `json:"outcome,omitempty"`
	Retryable bool       `json:"retryable,omitempty"`
	Ref       string     `json:"ref,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Submitter string     `json:"submitter,omitempty"`
	Queue     string     `json:"queue,omitempty"`
	Kind      string     `json:"kind,omitempty"`
	Priority  int32      `json:"priority,omitempty"`
	Max       uint32     `json:"max,omitempty"`
	Start     bool       `json:"start,omitempty"`
	Stale     bool       `json:"stale,omitempty"`
	Leases    []LeaseRef `json:"leases,omitempty"`
	// RunInNs (submit): the delay asked for before the job may run.
	RunInNs int64 `json:"run_in_ns,omitempty"`
	// TimeoutNs (submit): the job's timeout, from each lease's grant; a
	// lease past it ends timed_out, whatever its worker reports.
	TimeoutNs int64 `json:"timeout_ns,omitempty"`
	// RetryAfterNs (report): the delay a retryable failure asked for (a
	// snooze), in place of the job's retry policy.
	RetryAfterNs int64 `json:"retry_after_ns,omitempty"`
}

// Output holds a call's answer; each op uses the fields doc.go lists.
type Output struct {
	Grants       []Grant     `json:"grants,omitempty"`
	Replayed     bool        `json:"replayed,omitempty"`
	Created      bool        `json:"created,omitempty"`
	Job          *JobSummary `json:"job,omitempty"`
	State        JobState    `json:"state,omitempty"`
	Outcome      Outcome     `json:"outcome,omitempty"`
	Requeued     bool        `json:"requeued,omitempty"`
	Current      bool        `json:"current,omitempty"`
	CurrentToken uint64      `json:"current_token,omitempty"`
	Revoked      bool        `json:"revoked,omitempty"`
	Verdicts     []Verdict   `json:"verdicts,omitempty"`
	Unnamed      []LeaseRef  `json:"unnamed,omitempty"`
	Lease        *Lease      `json:"lease,omitempty"`
	Leases       []Grant     `json:"leases,omitempty"`
	Cancelled    []string    `json:"cancelled,omitempty"`
	Released     []LeaseRef  `json:"released,omitempty"`
}

// LeaseRef names one lease.
type LeaseRef struct {
	JobID string `json:"job_id"`
	Token uint64 `json:"token"`
}

// Grant is one lease an acquire handed out (or list_leases found).
type Grant struct {
	JobID     string `json:"job_id"`
	Token     uint64 `json:"token"`
	WorkerID  string `json:"worker_id,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	Started   bool   `json:"started,omitempty"`
	// GrantedAtNs is the lease's granted_at, the granting leader's time
	// (unix nanoseconds, not comparable with Entry.Ns); NotBeforeNs the
	// job's not_before as the same answer carried it (0: none).
	GrantedAtNs int64 `json:"granted_at_ns,omitempty"`
	NotBeforeNs int64 `json:"not_before_ns,omitempty"`
}

// Verdict is a heartbeat's answer for one lease it named.
type Verdict struct {
	JobID   string      `json:"job_id"`
	Token   uint64      `json:"token"`
	Verdict VerdictKind `json:"verdict"`
	Revoke  Revoke      `json:"revoke,omitempty"`
}

// Exec is one execution of a job under one lease, as its worker process
// saw it: exec_start when the job begins running, exec_stop when it has
// stopped running (not when it was told to stop).
type Exec struct {
	JobID    string `json:"job_id"`
	Token    uint64 `json:"token"`
	WorkerID string `json:"worker_id"`
	// Stop only.
	Cause StopCause `json:"cause,omitempty"`
	// LastAckSendNs (stop only): the send time, in CLOCK_MONOTONIC
	// nanoseconds, of the worker's last acknowledged heartbeat when the
	// job stopped; zero if unknown. With RenewNs and TolerationNs (the
	// cluster's timings as the worker last learned them) it gives the
	// self-stop deadline the stop must not pass.
	LastAckSendNs int64 `json:"last_ack_send_ns,omitempty"`
	RenewNs       int64 `json:"renew_ns,omitempty"`
	TolerationNs  int64 `json:"toleration_ns,omitempty"`
}

// StopCause says why an execution stopped.
type StopCause string

const (
	CauseCompleted     StopCause = "completed"      // the handler returned on its own
	CauseRevoked       StopCause = "revoked"        // heartbeat said stop (cancel or kill)
	CauseLost          StopCause = "lost"           // heartbeat said lost
	CauseSelfStop      StopCause = "self_stop"      // heartbeats unacknowledged past the self-stop deadline
	CauseShutdown      StopCause = "shutdown"       // the worker shut down
	CauseKilledProcess StopCause = "killed_process" // the process running it was killed
	CauseSignalled     StopCause = "signalled"      // a shell worker's command stopped on its supervisor's SIGTERM
)

// Sink names.
const (
	SinkFenced   = "fenced"
	SinkUnfenced = "unfenced"
)

// SinkWrite is one write a job attempted on a downstream store.
type SinkWrite struct {
	Sink     string `json:"sink"`
	JobID    string `json:"job_id"`
	Token    uint64 `json:"token"`
	WorkerID string `json:"worker_id,omitempty"`
	Key      string `json:"key,omitempty"`
	Accepted bool   `json:"accepted"`
	// CheckNs (fenced sink): when the fence check that decided this write
	// was invoked; zero means Entry.Ns.
	CheckNs int64 `json:"check_ns,omitempty"`
}

// Fault is one nemesis action: fault_start and fault_stop share an ID.
type Fault struct {
	ID      string   `json:"id"`
	Type    string   `json:"type,omitempty"`
	Targets []string `json:"targets,omitempty"`
	// Pause: the targets' processes stop running (SIGSTOP, a frozen VM).
	// A job running on a paused process may overrun its lease; the
	// checkers excuse that and insist on fencing instead.
	Pause bool `json:"pause,omitempty"`
	// Clock: the targets' clocks are moved or slowed.
	Clock bool `json:"clock,omitempty"`
	// ClockJumpNs (with Clock): the targets' clocks jumped by this much
	// (negative: back) when the fault started, and back by it when it
	// stopped. ClockRate: while it lasted they ran at this rate (1 is real
	// time; what they gained or lost stays after the stop). A clock fault
	// with neither is an unknown disturbance.
	ClockJumpNs int64   `json:"clock_jump_ns,omitempty"`
	ClockRate   float64 `json:"clock_rate,omitempty"`
	// Kill: the targets' processes were killed when the fault started (and
	// restarted, as new processes, when it stopped, if it stopped).
	Kill bool `json:"kill,omitempty"`
	// Disk: the target's disk was filled to the last byte when the fault
	// started, and freed when it stopped; node_ready follows the stop.
	Disk   bool   `json:"disk,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// FinalState is one node's state after the heal, read with stale reads
// from that node alone.
type FinalState struct {
	Node         string `json:"node"`
	StateHash    string `json:"state_hash,omitempty"`
	AppliedIndex uint64 `json:"applied_index"`
	LastToken    uint64 `json:"last_token"`
	// Complete: Jobs lists every job the node keeps.
	Complete bool         `json:"complete"`
	Jobs     []JobSummary `json:"jobs"`
	// Term is the node's Raft term; Members its Raft configuration with
	// each member's API address from its node table, sorted by id.
	Term    uint64   `json:"term,omitempty"`
	Members []Member `json:"members,omitempty"`
	// Events is the node's event log as it ends, read from its first
	// retained event.
	Events *EventLog `json:"events,omitempty"`
	// CutEventSeq is the highest last event seq the nodes' statuses gave
	// at the applied index every final state was read at (0 in histories
	// written before it was recorded). An event the run's watch saw beyond
	// it was made after the final states were read: the cluster went on
	// (a schedule fired) while the watch was still open.
	CutEventSeq uint64 `json:"cut_event_seq,omitempty"`
}

// EventLog sums up one node's event log at the end of a run: what it
// still holds, without holding it all.
type EventLog struct {
	// FirstSeq and LastSeq are the first and last events it holds (0:
	// none); Count how many it holds between them.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	Count    int    `json:"count"`
	// Truncated: asked for everything from seq 0, the node said events
	// had been dropped from the front.
	Truncated bool `json:"truncated,omitempty"`
	// ByType counts the events it holds by type.
	ByType map[string]int `json:"by_type,omitempty"`
	// StaleReports are the seqs of the lease.stale_report events it
	// holds.
	StaleReports []uint64 `json:"stale_reports,omitempty"`
}

// JobSummary is a job as one read saw it.
type JobSummary struct {
	ID    string   `json:"id"`
	State JobState `json:"state"`
	// Tokens of the leases the job keeps, oldest first (the server keeps a
	// bounded number: older ones are dropped).
	Tokens []uint64 `json:"tokens"`
	// CurrentToken is the live lease, zero when none.
	CurrentToken uint64 `json:"current_token,omitempty"`
	// Outcome of the newest reported lease, if any.
	Outcome  Outcome `json:"outcome,omitempty"`
	Attempts uint32  `json:"attempts,omitempty"`
	Losses   uint32  `json:"losses,omitempty"`
	Reason   string  `json:"reason,omitempty"`
	// Leases, when given, describe each token of Tokens, in the same order.
	Leases []Lease `json:"leases,omitempty"`
	// NotBeforeNs is the job's not_before (leader time, unix nanoseconds;
	// 0: none): its run-at time, then the end of its latest retry's
	// backoff. MaxAttempts and Retry are its spec's, as the server stamped
	// them.
	NotBeforeNs int64        `json:"not_before_ns,omitempty"`
	MaxAttempts uint32       `json:"max_attempts,omitempty"`
	Retry       *RetryPolicy `json:"retry,omitempty"`
}

// RetryPolicy is a job's retry policy: after its n-th failure it waits
// Initial × Multiplier^(n-1), at most Max, shortened by up to Jitter (a
// fraction, 0 to 1).
type RetryPolicy struct {
	InitialNs  int64   `json:"initial_ns"`
	MaxNs      int64   `json:"max_ns,omitempty"`
	Multiplier float64 `json:"multiplier,omitempty"`
	Jitter     float64 `json:"jitter,omitempty"`
}

// Lease is one lease of a job as a read saw it.
type Lease struct {
	Token     uint64     `json:"token"`
	WorkerID  string     `json:"worker_id,omitempty"`
	RequestID string     `json:"request_id,omitempty"`
	State     LeaseState `json:"state"`
	Revoke    Revoke     `json:"revoke,omitempty"`
	Started   bool       `json:"started,omitempty"`
	ReportID  string     `json:"report_id,omitempty"`
	Outcome   Outcome    `json:"outcome,omitempty"`
	Retryable bool       `json:"retryable,omitempty"`
	Ref       string     `json:"ref,omitempty"`
	// GrantedAtNs and EndedAtNs are the leader times (unix nanoseconds)
	// the lease was granted and ended at (0: not ended).
	GrantedAtNs int64 `json:"granted_at_ns,omitempty"`
	EndedAtNs   int64 `json:"ended_at_ns,omitempty"`
}

// ClusterEvent is one event of the cluster's replicated event log as the
// runner read it; Entry.Ns is when the runner received it, which is after
// it committed.
type ClusterEvent struct {
	Seq      uint64 `json:"seq"`
	Index    uint64 `json:"index,omitempty"`
	Type     string `json:"type"`
	JobID    string `json:"job_id,omitempty"`
	Token    uint64 `json:"token,omitempty"`
	WorkerID string `json:"worker_id,omitempty"`
	Ref      string `json:"ref,omitempty"`
	Detail   string `json:"detail,omitempty"`
	// TimeUnixNs is the leader's wall-clock stamp; informational only,
	// as it does not compare with Ns.
	TimeUnixNs int64  `json:"time_unix_ns,omitempty"`
	Node       string `json:"node,omitempty"`
	// Actor and Source (audit events): who acted, from which address.
	Actor  string `json:"actor,omitempty"`
	Source string `json:"source,omitempty"`
}

// Event types the checkers read (the cluster records more).
const (
	EventLeaseAcquired   = "lease.acquired"
	EventLeaseReported   = "lease.reported"
	EventLeaseExpired    = "lease.expired"
	EventLeaseReleased   = "lease.released"
	EventStaleReport     = "lease.stale_report"
	EventStaleAction     = "lease.stale_action"
	EventReportConflict  = "lease.report_conflict"
	EventAbsenceRule     = "leader.absence_rule"
	EventLeaderChanged   = "leader.changed"
	EventJobSubmitted    = "job.submitted"
	EventJobRequeued     = "job.requeued"
	EventRetryScheduled  = "job.retry_scheduled"
	EventJobCancelled    = "job.cancelled"
	EventJobLost         = "job.lost"
	EventJobFailed       = "job.failed"
	EventWorkerReachable = "worker.reachable"
	EventAudit           = "audit"
	// A schedule's slot fired (JobID NAME@SLOT) or slots skipped (Detail
	// "NAME: N slots through SLOT skipped...").
	EventScheduleFired   = "schedule.fired"
	EventScheduleSkipped = "schedule.skipped"
)

// Marker is the payload of heal, leader_elected and worker_gone.
type Marker struct {
	Node     string `json:"node,omitempty"`
	WorkerID string `json:"worker_id,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// Attempt is one try of the outsider nemesis, a process on an address that
// is no member's, to change a node through its peer port: a forged join or
// a forged Raft message.
type Attempt struct {
	Attack string `json:"attack"` // one of the Attack names
	Node   string `json:"node"`   // the node tried
	Via    string `json:"via"`    // ViaTCP or ViaClientCert
	// Claim (joins) is who the join said the caller was.
	Claim *Member `json:"claim,omitempty"`
	// Term (Raft messages) is the term the message carried.
	Term uint64 `json:"term,omitempty"`
	// Accepted: the node answered without an error.
	Accepted bool `json:"accepted"`
	// Code is the node's refusal code, when it refused with one (a peer
	// RPC's code); Error says how the attempt failed otherwise.
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// Attacks of the outsider nemesis.
const (
	// A join under a new id, naming the outsider's own Raft address.
	AttackJoinStranger = "join-stranger"
	// A join naming the leader's id and Raft address, with the capture
	// server as its API address: were it taken, followers and clients
	// would send callers' requests there.
	AttackJoinTakeover = "join-takeover"
	// A join naming a live member's id at the outsider's Raft address,
	// where the outsider answers peer.info as that member.
	AttackJoinImpostor = "join-impostor"
	// Raft messages sent through a raft.NetworkTransport.
	AttackRaftAppend     = "raft-append"
	AttackRaftVote       = "raft-vote"
	AttackRaftTimeoutNow = "raft-timeout-now"
)

// How an attempt reached the node.
const (
	ViaTCP        = "tcp"             // plain TCP
	ViaClientCert = "tls-client-cert" // TLS with an API client certificate of the cluster's CA
)

// Capture is one connection the outsider's capture server received. Its
// address is what the attacks try to plant as a member's API address:
// nobody has a reason to connect to it.
type Capture struct {
	From string `json:"from"`
	// First says what the connection's first bytes looked like (tls,
	// http/2, or an HTTP/1 request line), if it sent any.
	First string `json:"first,omitempty"`
	// Count is how many connections the server had received, this one
	// included.
	Count int `json:"count"`
}

// FloodCall is one call of the flood: a client on an address of its own
// that sends the cluster what a careless or hostile client would, beside
// the real load. Every one must be refused.
type FloodCall struct {
	Attack string `json:"attack"` // one of the Flood* attack names
	Node   string `json:"node"`   // the node called
	// Cred is the credential it carried: CredNone, CredValid (the flood's
	// own token, a worker's scoped to made-up ids) or CredWrong (a token
	// no node knows).
	Cred string `json:"cred"`
	// Status is the HTTP status of the answer (0: none came); Code and
	// Reason the API's refusal code and reason, when it gave them.
	Status int    `json:"status,omitempty"`
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Served: answered 2xx, as if the call had been allowed.
	Served bool `json:"served"`
	// Error says how the call ended without an answer (a reset, a
	// timeout, the flood stopping it).
	Error string `json:"error,omitempty"`
	// HeldNs (idle connections): how long the connection was held open
	// from its headers to its end.
	HeldNs int64 `json:"held_ns,omitempty"`
}

// Attacks of the flood.
const (
	// A gzip message that inflates to tens of MiB.
	FloodGzipBomb = "gzip-bomb"
	// A body announcing more than the node takes (Content-Length).
	FloodOversizedDeclared = "oversized-declared"
	// A body over the bound with no length announced.
	FloodOversizedStreamed = "oversized-streamed"
	// A connection that sends a request's headers and never its body.
	FloodIdleConn = "idle-conn"
	// Heartbeats and acquires in the names of workers nobody registered.
	FloodGhostHeartbeat = "ghost-heartbeat"
	FloodGhostAcquire   = "ghost-acquire"
	// A call with a token no node knows.
	FloodWrongToken = "wrong-token"
	// An admin-only call with a non-admin (or a wrong) token.
	FloodAdminCall = "admin-call"
	// An acquire in a real worker's name with a credential scoped to
	// other ids.
	FloodImpersonate = "impersonate"
)

// Credentials a flood call carries.
const (
	CredNone  = "none"
	CredValid = "valid"
	CredWrong = "wrong"
)

// FloodGhostPrefix starts the made-up worker ids of the flood's ghost
// heartbeats and acquires: no event may ever name one.
const FloodGhostPrefix = "flood-ghost-"

// JobState is a job's state, the API's JobState without its prefix.
type JobState string

const (
	JobQueued    JobState = "queued"
	JobAcquired  JobState = "acquired"
	JobRunning   JobState = "running"
	JobReported  JobState = "reported"
	JobCancelled JobState = "cancelled"
	JobLost      JobState = "lost"
	JobFailed    JobState = "failed"
	JobDead      JobState = "dead" // out of attempts or poison, from cluster level 6
)

// Terminal reports whether a job in state s is finished for good.
func (s JobState) Terminal() bool {
	switch s {
	case JobReported, JobCancelled, JobLost, JobFailed, JobDead:
		return true
	}
	return false
}

// Leased reports whether a job in state s has a live lease.
func (s JobState) Leased() bool { return s == JobAcquired || s == JobRunning }

// LeaseState is a lease's state.
type LeaseState string

const (
	LeaseActive   LeaseState = "active"
	LeaseReported LeaseState = "reported"
	LeaseExpired  LeaseState = "expired"
	LeaseReleased LeaseState = "released"
)

// Outcome is a report's outcome.
type Outcome string

const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeCancelled Outcome = "cancelled"
	OutcomeKilled    Outcome = "killed"
	// OutcomeTimedOut is the server's, never a worker's: a lease its
	// leader revoked past the job's timeout ends with it.
	OutcomeTimedOut Outcome = "timed_out"
)

// VerdictKind is a heartbeat's word on one lease.
type VerdictKind string

const (
	VerdictKeep VerdictKind = "keep"
	VerdictStop VerdictKind = "stop"
	VerdictLost VerdictKind = "lost"
)

// Revoke is a pending cancel or kill of a live lease.
type Revoke string

const (
	RevokeCancel Revoke = "cancel"
	RevokeKill   Revoke = "kill"
)

// Validate checks that e is well formed: a known kind, its payload and no
// other, and the fields doc.go marks required.
func (e *Entry) Validate() error {
	if e.Ns <= 0 {
		return fmt.Errorf("%w: %s entry without ns", ErrInvalidEntry, e.Kind)
	}
	set := 0
	for _, p := range []bool{e.Run != nil, e.RunEnd != nil, e.Op != nil, e.Exec != nil, e.Sink != nil,
		e.Fault != nil, e.Final != nil, e.Event != nil, e.Marker != nil, e.Attempt != nil, e.Capture != nil, e.Flood != nil} {
		if p {
			set++
		}
	}
	want, err := e.checkPayload()
	if err != nil {
		return err
	}
	if set != want {
		return fmt.Errorf("%w: %s entry with %d payloads, want %d", ErrInvalidEntry, e.Kind, set, want)
	}
	return nil
}

// checkPayload checks the payload of e's kind and returns how many payload
// fields the kind has (heal may carry a marker or not).
func (e *Entry) checkPayload() (int, error) {
	bad := func(what string) (int, error) {
		return 0, fmt.Errorf("%w: %s entry: %s", ErrInvalidEntry, e.Kind, what)
	}
	switch e.Kind {
	case KindRun:
		if e.Run == nil {
			return bad("no run")
		}
		if e.Run.Format != FormatVersion {
			return 0, fmt.Errorf("%w: format %d, this reader knows %d", ErrFormat, e.Run.Format, FormatVersion)
		}
		return 1, nil
	case KindRunEnd:
		if e.RunEnd == nil {
			return bad("no run_end")
		}
		return 1, nil
	case KindInvoke, KindComplete:
		if e.Op == nil || e.Op.ID == 0 || e.Op.Name == "" || e.Process == "" {
			return bad("op needs op_id, op and process")
		}
		if e.Kind == KindComplete {
			switch e.Op.Status {
			case StatusOK, StatusInfo:
			case StatusFail:
				if e.Op.Reason == "" {
					return bad("fail without reason")
				}
			default:
				return bad(fmt.Sprintf("status %q", e.Op.Status))
			}
		}
		return 1, nil
	case KindExecStart, KindExecStop:
		if e.Exec == nil || e.Exec.JobID == "" || e.Exec.Token == 0 || e.Exec.WorkerID == "" {
			return bad("exec needs job_id, token and worker_id")
		}
		if e.Kind == KindExecStop && e.Exec.Cause == "" {
			return bad("exec_stop without cause")
		}
		return 1, nil
	case KindSinkWrite:
		if e.Sink == nil || e.Sink.JobID == "" || e.Sink.Token == 0 {
			return bad("sink needs job_id and token")
		}
		if e.Sink.Sink != SinkFenced && e.Sink.Sink != SinkUnfenced {
			return bad(fmt.Sprintf("sink %q", e.Sink.Sink))
		}
		return 1, nil
	case KindFaultStart, KindFaultStop:
		if e.Fault == nil || e.Fault.ID == "" {
			return bad("fault needs id")
		}
		if e.Kind == KindFaultStart && e.Fault.Type == "" {
			return bad("fault_start without type")
		}
		return 1, nil
	case KindFinalState:
		if e.Final == nil || e.Final.Node == "" {
			return bad("final needs node")
		}
		return 1, nil
	case KindClusterEvent:
		if e.Event == nil || e.Event.Seq == 0 || e.Event.Type == "" {
			return bad("event needs seq and type")
		}
		return 1, nil
	case KindHeal:
		if e.Marker != nil {
			return 1, nil
		}
		return 0, nil
	case KindLeaderElected:
		if e.Marker == nil || e.Marker.Node == "" {
			return bad("marker needs node")
		}
		return 1, nil
	case KindWorkerGone:
		if e.Marker == nil || e.Marker.WorkerID == "" {
			return bad("marker needs worker_id")
		}
		return 1, nil
	case KindOutsiderAttempt:
		if e.Attempt == nil || e.Attempt.Attack == "" || e.Attempt.Node == "" || e.Attempt.Via == "" {
			return bad("attempt needs attack, node and via")
		}
		return 1, nil
	case KindOutsiderCapture:
		if e.Capture == nil || e.Capture.From == "" || e.Capture.Count <= 0 {
			return bad("capture needs from and a positive count")
		}
		return 1, nil
	case KindNodeReady:
		if e.Marker == nil || e.Marker.Node == "" {
			return bad("marker needs node")
		}
		return 1, nil
	case KindFloodCall:
		if e.Flood == nil || e.Flood.Attack == "" || e.Flood.Node == "" || e.Flood.Cred == "" {
			return bad("flood needs attack, node and cred")
		}
		return 1, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownKind, e.Kind)
}
