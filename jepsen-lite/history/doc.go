// Package history is the record of a jepsen-lite run: what the clients
// asked and were told, what the workers ran and when, what the downstream
// stores accepted, what the nemesis broke, what the cluster logged, and
// what every node held at the end. The runner writes it; package checker
// reads it and judges the invariants of SPEC section 9.
//
// # Files and clocks
//
// A history is JSON Lines: one Entry per line, UTF-8, each line written
// whole the moment the thing it records happened (Recorder does this), so
// a runner killed mid-run leaves a readable prefix. Read is strict: an
// unknown field or kind, or an entry missing a required field, is an error
// naming the line; only a cut last line is forgiven (ErrTruncated).
//
// Every time is int64 nanoseconds of CLOCK_MONOTONIC (Now). All processes
// of a run share one machine, so their clocks agree and their entries
// compare; several files (one per process) merge into one history by
// concatenation. Times must be real: a checker compares an expiry's
// observation with a worker's stop across processes. Note that the worker
// runtime's self-stop reads CLOCK_BOOTTIME; on a machine that does not
// suspend during a run the two advance together, but last_ack_send_ns must
// still be converted to CLOCK_MONOTONIC before it is written.
//
// # Entry
//
// Every line has:
//
//	seq      int    the recorder's append order, from 1 (informational)
//	kind     string one of the kinds below; it says which payload is set
//	ns       int    when it happened (required, > 0)
//	process  string who acted: the client or worker making a call, the
//	                worker process running a job, "nemesis", "runner".
//	                Fault targets name the same things.
//
// and exactly one payload object named after its kind (none for heal):
//
//	run             run        run_end        run_end
//	invoke          op         complete       op
//	exec_start      exec       exec_stop      exec
//	sink_write      sink       fault_start    fault
//	fault_stop      fault      final_state    final
//	cluster_event   event      heal           marker (optional)
//	leader_elected  marker     worker_gone    marker
//	outsider_attempt attempt   outsider_capture capture
//	node_ready      marker     flood_call     flood
//
// # run, run_end
//
// run opens the history: format (required, FormatVersion), name, seed,
// nodes, workers and nemeses (names), renew_ns, grace_ns, toleration_ns
// (the cluster's configured timings), election_timeout_ns and
// heartbeat_timeout_ns (Raft's), members (the configured nodes: id,
// raft_addr, api_addr), secure (peer mutual TLS and API tokens on) and
// flood_source (the address the flood calls from; empty: no flood).
// Checkers use the timings unless told otherwise. run_end closes it: events_complete is
// true only if the runner read the cluster's event log from its first
// event to last_event_seq without a gap (no truncated answer, no reconnect
// that skipped); checks that need an event for every refusal, or replay
// every committed state, run only then.
//
// # invoke, complete: operations
//
// A call is two entries sharing op.op_id within one process: invoke when
// it is sent, complete when its answer is in. An invoke with no complete
// (the runner died, the run ended) is an unknown outcome. Op ids must be
// unique per process; a process name must be recorded by one recorder.
//
//	op.op_id   uint   required, > 0
//	op.op      string the operation's name, below (both entries)
//	op.input   Input  (invoke) the arguments
//	op.status  string (complete) ok | fail | info
//	op.reason  string (complete) fail: the API's reason code (STALE_TOKEN,
//	                  CONFLICT, NOT_FOUND, NOT_OWNER, JOB_FINISHED, ...),
//	                  required; info: why unknown (TIMEOUT,
//	                  OUTCOME_UNKNOWN, UNAVAILABLE, CANCELED, ...)
//	op.output  Output (complete, ok only) the answer
//
// ok is a success. fail is a definite refusal: the call changed nothing
// (save the event a refusal records). info is an unknown outcome: the call
// may take effect at any time after its invoke, or never. The client
// retries by itself; a call ends info when its context ended with the
// outcome still open (Classify maps client errors, Recorder.CompleteErr
// records them). A retried call is one op: its answer may be a repeat's
// (an acquire replayed, a submit answered created=false for the job its
// own lost first attempt made).
//
// Input fields (omit what an op does not take): job_id, token, worker_id,
// request_id, report_id, outcome, retryable, ref, reason, submitter,
// queue, kind, priority, max, start, stale, leases ([{job_id, token}]),
// run_in_ns, retry_after_ns.
// Output fields: grants ([Grant]), replayed, created, job (JobSummary),
// state (a job state), outcome, requeued, current, current_token, revoked,
// verdicts ([Verdict]), unnamed ([{job_id, token}]), lease (Lease), leases
// ([Grant]), cancelled ([job ids]), released ([{job_id, token}]). A false
// or zero output field may be omitted. Per op, the fields the checkers
// read (write them all):
//
//	submit            in: job_id (queue, kind, priority, submitter),
//	                  run_in_ns (the delay asked for, if any)
//	                  out: created (true iff this call made the job), job
//	                  (its not_before_ns as the leader stamped it)
//	acquire           in: worker_id, request_id, max, start
//	                  out: grants — each {job_id, token, worker_id,
//	                  request_id, started (the lease's started_at was set),
//	                  granted_at_ns (the granting leader's time),
//	                  not_before_ns (the job's, as the answer carried it)}
//	                  — and replayed
//	start             in: worker_id, job_id, token    out: lease
//	heartbeat         in: worker_id, leases (those it named)
//	                  out: verdicts — {job_id, token, verdict keep|stop|
//	                  lost, revoke cancel|kill} in the order named — and
//	                  unnamed
//	report            in: worker_id, job_id, token, report_id, outcome,
//	                  retryable, ref, retry_after_ns (a snooze's delay)
//	                  out: outcome, state (the job's state right after:
//	                  reported, or queued when requeued), requeued
//	release           in: worker_id, job_id, token, reason    out: job
//	cancel, kill      in: job_id, reason    out: job (or state), revoked
//	cancel_submitter  in: submitter    out: cancelled
//	get_job           in: job_id, stale    out: job
//	get_lease         in: job_id, token, stale    out: lease
//	fence_check       in: job_id, token
//	                  out: current, current_token (0: no live lease),
//	                  state ("" for an unknown job)
//	list_leases       in: worker_id, stale    out: leases
//	register          in: worker_id    deregister in: worker_id
//	                  out (deregister): released
//
// Outcomes are succeeded | failed | cancelled | killed; job states queued |
// acquired | running | reported | cancelled | lost | failed; lease states
// active | reported | expired | released: the API's enums lowercased
// without their prefix (JobStateOf and friends convert).
//
// # exec_start, exec_stop: executions
//
// A worker process records exec_start when a job begins running under a
// lease and exec_stop when it has stopped running (its handler returned,
// its child exited), not when it was told to stop. They pair by (job_id,
// token, worker_id, process), first in first out.
//
//	exec.job_id, exec.token, exec.worker_id   required
//	exec.cause             (stop, required) completed | revoked | lost |
//	                       self_stop | shutdown | killed_process |
//	                       signalled (a shell worker's command, on its
//	                       supervisor's SIGTERM)
//	exec.last_ack_send_ns  (stop) send time of the worker's last
//	                       acknowledged heartbeat when the job stopped, 0
//	                       if unknown; the self-stop deadline is this +
//	                       toleration − 2 × renew
//	exec.renew_ns, exec.toleration_ns  (stop) the cluster's timings as the
//	                       worker last learned them; 0: use the run's
//
// A process killed cannot record its stop: an exec_start left open ends at
// the first kill fault (or worker_gone) naming its process or worker after
// it started; one with neither runs to the end of time.
//
// A shell worker's command (`leasehold worker run`, jepsen-lite shell-job)
// is a process of its own, named WORKER/TOKEN/PID, which records its own
// start and its stop (completed, or signalled on SIGTERM). A command
// SIGKILLed (its supervisor stops a command at the self-stop deadline or
// on a lost lease with SIGTERM then SIGKILL at once) cannot: a watcher
// process outside its process group, holding the other end of a pipe
// from it, records exec_stop (killed_process) when the pipe closes, which
// is after the command has died. Its last_ack_send_ns is derived from the
// worker's deadline file (the deadline − toleration + 2 × renew), so the
// self-stop check holds commands to the deadline the supervisor enforces.
//
// # sink_write
//
// One write a job attempted on a downstream store: the fenced sink checks
// the token with fence_check before accepting; the unfenced sink accepts
// anything.
//
//	sink.sink       fenced | unfenced (required)
//	sink.job_id, sink.token   required
//	sink.worker_id, sink.key  who wrote, and what
//	sink.accepted   the store kept the write (always written, even false)
//	sink.check_ns   (fenced) when the deciding fence check was invoked;
//	                0 means ns
//
// # fault_start, fault_stop
//
// One nemesis action, paired by fault.id. A fault never stopped lasts to
// the end.
//
//	fault.id        required
//	fault.type      (start, required) e.g. partition-leader, kill-9,
//	                sigstop-leader, sigstop-worker, clock-skew,
//	                proxy-delay, transfer, worker-cut
//	fault.targets   names of the nodes, workers or processes it hit
//	fault.pause     the targets stop running while it lasts (a SIGSTOP):
//	                their executions are excused from timing (I3, I4) and
//	                fencing must hold instead
//	fault.clock     the targets' clocks are moved or slowed
//	fault.clock_jump_ns  (with clock) the targets' clocks jumped by this
//	                (negative: back) at the start, and back at the stop
//	fault.clock_rate     (with clock) the rate the targets' clocks ran at
//	                while it lasted (1: real time); what they gained stays.
//	                A clock fault with neither is an unknown disturbance
//	fault.kill      the targets' processes were killed at the start (and,
//	                if it stops, restarted as new processes at the stop)
//	fault.disk      the target node's disk was filled at the start and
//	                freed at the stop (node_ready follows when it is seen
//	                ready again)
//	fault.detail    free text
//
// The checkers also treat types pause, sigstop, sigstop-leader and
// sigstop-worker as pauses, clock-skew as a clock fault, and kill, kill-9
// and crash as killing their targets' processes (checker.Options extends
// the lists).
//
// # final_state
//
// After the heal and once the nodes agree on an applied index, one entry
// per node, read from that node alone with stale reads.
//
//	final.node           required
//	final.state_hash     a hash of the node's state; HashJobs when the
//	                     cluster offers none
//	final.applied_index  the node's applied index when read
//	final.last_token     the node's token counter
//	final.complete       jobs lists every job the node keeps (always
//	                     written); a partial listing is not judged for
//	                     missing jobs
//	final.jobs           [JobSummary]
//	final.term           the node's Raft term
//	final.members        the node's Raft configuration, each member with
//	                     its API address from the node's table: [{id,
//	                     raft_addr, api_addr, voter}], sorted by id
//	final.events         the node's event log as it ends, read from seq 0:
//	                     {first_seq, last_seq, count (events held),
//	                     truncated (the node said earlier ones were
//	                     dropped), by_type (counts), stale_reports (the
//	                     seqs of the lease.stale_report events held)}
//
// A JobSummary (also get_job's and release's output) is: id, state, tokens
// (every lease token the job keeps, oldest first; the server keeps the
// last 32), current_token (the live lease, 0 if none), outcome (of the
// newest reported lease), attempts, losses, reason, not_before_ns (the
// leader time before which it is not granted; 0: none), max_attempts,
// retry ({initial_ns, max_ns, multiplier, jitter}: the spec's policy as the
// server stamped it), and leases, one per token in the same order: {token,
// worker_id, request_id, state, revoke, started, report_id, outcome,
// retryable, ref, granted_at_ns, ended_at_ns (leader times)}. A job read as
// scheduled (queued, not yet due by the answering node's clock) is
// recorded as queued. JobSummaryOf builds it
// from the API's Job; without leases, checks of report outcomes are
// skipped.
//
// # cluster_event
//
// One event of the cluster's replicated event log as read (Watch or
// ListEvents); ns is when the runner received it, after it committed.
//
//	event.seq, event.type    required (lease.acquired, lease.expired,
//	                         lease.stale_report, leader.absence_rule, ...)
//	event.index, event.job_id, event.token, event.worker_id, event.ref,
//	event.detail             as the cluster gave them
//	event.time_unix_ns       the leader's wall-clock stamp (informational)
//	event.node               the node read from
//	event.actor, event.source  (audit events) who acted, from which
//	                         address (host:port)
//
// An event read twice (a reconnect) may be recorded twice; the checkers
// keep the first of each seq.
//
// # heal, leader_elected, worker_gone
//
// heal: the nemesis has undone every fault it will undo; the last heal
// starts the recovery clock. leader_elected (marker.node required): the
// runner observed that node leading and ready, at ns; record the first
// observation after each heal. worker_gone (marker.worker_id required):
// the worker's process ended for good at ns (no restart before the end of
// the run); a kill fault on it never stopped means the same.
//
// # outsider_attempt, outsider_capture
//
// The outsider nemesis is a process on an address of its own that is no
// member's. outsider_attempt is one of its tries on one node's peer port,
// recorded when the node answered or the try failed:
//
//	attempt.attack    required: join-stranger, join-takeover,
//	                  join-impostor, raft-append, raft-vote,
//	                  raft-timeout-now
//	attempt.node      required: the node tried
//	attempt.via       required: tcp, or tls-client-cert (TLS presenting a
//	                  client certificate of the cluster's CA)
//	attempt.claim     (joins) who the join said the caller was: {id,
//	                  raft_addr, api_addr}
//	attempt.term      (Raft messages) the term carried
//	attempt.accepted  the node answered without an error
//	attempt.code      the node's refusal code (peer RPC), if it gave one
//	attempt.error     how the attempt failed otherwise
//
// outsider_capture is one connection to the outsider's capture server,
// whose address the joins offer as an API address: capture.from (required),
// capture.first (what its first bytes looked like), capture.count (the
// connections so far, required).
//
// # node_ready
//
// After a disk fault freed a node's disk, the nemesis waits for the node
// to say it is ready again (GET /readyz); node_ready (marker.node
// required) is when it first did, marker.detail how long after the free.
// A freed node with no node_ready was never seen ready again.
//
// # flood_call
//
// The flood is a client on an address of its own (run.flood_source) that
// sends the cluster, beside the real load, what a careless or hostile
// client would. Every call is recorded when it ended:
//
//	flood.attack   required: gzip-bomb, oversized-declared,
//	               oversized-streamed, idle-conn, ghost-heartbeat,
//	               ghost-acquire, wrong-token, admin-call, impersonate
//	flood.node     required: the node called
//	flood.cred     required: none, valid (the flood's own token, a
//	               worker's scoped to made-up ids) or wrong (no node's)
//	flood.status   the HTTP status of the answer, 0 if none came
//	flood.code, flood.reason  the refusal's code and the API's reason
//	flood.served   answered 2xx: the call was allowed (never right)
//	flood.error    how it ended without an answer
//	flood.held_ns  (idle-conn) how long the connection was held open
//
// Ghost worker ids start with flood-ghost- (FloodGhostPrefix).
package history
