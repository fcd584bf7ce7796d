// Package supervisor runs a shell worker's commands so that they outlive
// the worker: each command runs under a small supervisor process of its own
// (`leasehold supervise`, like containerd's shim) in a session of its own,
// which waits for the command and writes its result into the worker's state
// directory. A worker restarted with the same id finds each job's
// supervisor there and re-attaches to it.
//
// The state directory of one worker (Dir) holds:
//
//	deadline              the self-stop deadline: CLOCK_BOOTTIME nanoseconds, decimal,
//	                      rewritten by the worker at every acknowledged heartbeat
//	jobs/TOKEN/payload    the job's payload, the command's stdin
//	jobs/TOKEN/ref        LEASEHOLD_REF_FILE
//	jobs/TOKEN/retry-after LEASEHOLD_RETRY_AFTER_FILE
//	jobs/TOKEN/progress   LEASEHOLD_PROGRESS_FILE: its last line is the job's progress note,
//	                      read by the worker while it waits (Job.Progress)
//	jobs/TOKEN/supervisor the supervisor's pid and process start time, then also the
//	                      command's (written by the supervisor, atomically)
//	jobs/TOKEN/result     how the command ended: exit status, stderr tail, ref, and
//	                      whether the supervisor stopped it (written once, atomically)
//
// Every file is written to a temporary name and renamed, so a reader sees a
// whole file or none. A process is named by its pid and its start time from
// /proc/PID/stat, so a pid the kernel handed to another process is never
// mistaken for the supervisor or its command.
//
// The promise the supervisor keeps for the worker: the command never runs
// past the self-stop deadline unless the worker renews it. The worker writes
// the deadline (the send time of its last acknowledged heartbeat +
// toleration − 2 × renew, on the suspend-aware clock) before it starts any
// command and at every acknowledgement; a supervisor that finds the
// deadline passed stops its command exactly as the worker would: SIGTERM
// to the command's process group, then SIGKILL at once. So a worker killed
// with SIGKILL leaves no command running after its leases could expire.
//
// A restarted worker settles a job whose command it cannot find (no
// supervisor, no result, or a command the supervisor stopped at the
// deadline) by the job's kind: an evaluation is released, a run-style job
// is settled as lost: the worker releases its lease as a lost worker's
// (client.ErrExecutionLost, Client.ReleaseAsLost), so the job ends `lost`
// without an attempt, exactly as an expiry would end it, and never runs a
// second time. On a cluster where a voter still runs a build that cannot
// apply that, it is reported failed with "worker lost" instead.
//
// Signals from the worker to a supervisor: SIGTERM asks for a graceful stop
// (SIGTERM to the command's group, SIGKILL after the kill-after grace; a
// cancel, or a worker shutting down), SIGUSR1 for a kill (SIGKILL at once),
// SIGUSR2 for a lost lease (SIGTERM, then SIGKILL at once).
package supervisor
