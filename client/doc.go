// Package client is the Go client of a leasehold cluster and the worker
// runtime that runs jobs on leases.
//
// # The client
//
// A Client holds a list of API endpoints and sends every call to one of
// them, its pin. Every answer, success or error, may name the leader in the
// Leasehold-Leader header, and the client moves its pin there. A NOT_LEADER
// answer with a leader address is followed at once.
//
// A hint is followed only to a configured endpoint or to an API address the
// cluster itself listed: the client never sends a request, and so never its
// bearer token, to an address that is neither. A hint is a claim in a reply,
// and one poisoned reply or one wrong node must not be able to send the
// client elsewhere. When a hint names an address the client does not know
// (a node added since the configuration was written), it asks the
// configured endpoints for the member list (ClusterService.Members, with
// its token, for at most two seconds) and follows the hint if the list
// names it. It reads the list at most once a second, so a stream of bad
// hints costs one call a second, and a pin on a node the list no longer
// names moves back to the endpoints. An ignored hint is treated like any
// other retryable failure.
//
// Answers that mean "not now, not here" (NO_LEADER, NOT_READY,
// SHUTTING_DOWN, OUTCOME_UNKNOWN, TIMEOUT) and transport failures (dial
// errors, broken connections, a proxy's 503) move the pin to the next
// endpoint and retry after a backoff with full jitter, until the caller's
// context ends. Everything else (INVALID_ARGUMENT, STALE_TOKEN, CONFLICT,
// ...) is an answer, returned at once as an *Error whose Unwrap is the
// sentinel of its reason: errors.Is(err, ErrStaleToken).
//
// Retrying a write is safe only because every write of the API is
// idempotent given its ids: a job id, an acquire's request id, a report's
// report id. So the client fixes those before the first attempt (Submit,
// Acquire and Report fill an empty id with a random one), and every retry,
// on whichever node, carries the same id and gets the first answer: a
// retried acquire never takes a second lease, a retried report is never a
// conflict with itself.
//
// CallTimeout bounds each attempt, so a hung node costs one attempt, not
// the call; when the caller's context has no deadline it bounds the whole
// call too. A long poll (Acquire, Events with a wait) gets its wait on top.
// Watch keeps a server stream open and reconnects from the last event it
// delivered. Snapshots are plain HTTP on /v1/snapshot and follow the same
// pinning.
//
// # The worker runtime
//
// A Worker registers (learning the cluster's renew, grace and toleration;
// the server's configuration is the truth), re-attaches to the leases it
// held before a restart (Reattach decides, per job, to run it again or
// release it), then long-polls Acquire for as many jobs as it has free
// slots and runs each in its handler. A full worker takes its next job in
// the report of the last one (ReportRequest.next: one call per job, not
// two), and long-polls again only when a report brought none.
//
// It sends one heartbeat per renew, not one per lease, naming every lease
// it holds, over one long-lived heartbeat stream to the leader
// (Client.HeartbeatStream; one unary Heartbeat call each on a cluster that
// does not serve streams; each message leaves as one HTTP/2 frame, see
// frames.go, and messages sent at the same moment by the workers of one
// process sharing a stream leave in one), and applies the reply: keep; stop (the job was
// cancelled or killed: the handler's context is cancelled with a
// *RevokedError, and its result is still reported; a kill that follows a
// cancel closes Killed(ctx)); lost (cancelled with ErrLeaseLost, and
// nothing is reported, since another worker may hold the job). Live leases the reply
// lists as unnamed, that the worker does not know (an acquire whose answer
// was lost, a grant it dropped), are released so their jobs run elsewhere
// at once; not one it held when the beat was sent and let go before the
// answer came (that answer is older than the report or release).
//
// The promise is that a job never runs twice. The server expires a silent
// worker's leases toleration after it last heard from it; the worker stops
// its own jobs earlier, at the send time of its last acknowledged heartbeat
// plus toleration minus two renews. The send time is read before sending
// and the server counts from arrival, which is never earlier, so the worker
// stops at least two heartbeats before the server could give the job to
// another, as long as the two clocks' rates differ by less than
// 2×renew/toleration. The deadline is a single timer, re-armed at each
// acknowledgement, on a clock that keeps counting while the machine is
// suspended (CLOCK_BOOTTIME on Linux, for both readings and timers): Go's
// own clock stops during suspend, and a worker that woke up after its
// leases expired would otherwise run on. After a self-stop the worker takes
// no job until a heartbeat is acknowledged again. Fencing tokens (Job.Token)
// cover what timing cannot, such as a process paused mid-write. Jobs that
// run in processes of their own, which outlive the worker, keep the same
// promise while it is down: WorkerOptions.Deadline hands them each new
// deadline (package client/supervisor does this for `worker run`).
//
// # Middleware and progress
//
// WorkerOptions.Middleware wraps every handler the worker runs, the first
// outermost, for what every job needs: logging, metrics, tracing, a recover
// that reports a panic your way (the runtime recovers panics anyway, as
// failures). See the Middleware example.
//
// A handler can say how far its job has got with Job.Progress("step 3 of
// 5"): a note of at most 256 bytes (longer is cut; control characters
// become spaces), the latest winning, that travels with the worker's next
// heartbeat for the lease, never in a call of its own, and that `leasehold
// job get` shows. The leader keeps notes in its memory only: they are gone
// when the lease ends and when leadership moves (the worker then sends each
// lease's latest note again with its next beat, having seen the term
// change in the answer), and a follower's stale read shows none. The
// worker sends notes only after an answer said the server takes them
// (HeartbeatResponse.notes_term): a server from before notes refuses a
// heartbeat carrying one, and one such refusal (the leader moved to an
// older node during an upgrade) has the worker heartbeat again at once
// without notes.
//
// When Run's context ends the worker stops acquiring, lets running handlers
// finish within DrainTimeout while it keeps heartbeating, then cancels the
// rest with ErrShutdown and releases their leases (no attempt is used). It
// does not deregister: a restart with the same id re-attaches. Every
// goroutine the Worker starts has ended when Run returns, and every one the
// Client starts when Close returns.
package client
