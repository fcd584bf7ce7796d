// Package workload is what jepsen-lite asks of a cluster, and how each
// call becomes history: the worker processes (client.Worker with handlers
// that record their executions and write to the sinks, and an Observer
// that records every call the runtime makes), the fenced and unfenced
// sinks the runner serves, and the runner's own actors — a submitter that
// also cancels and kills, a reader of linearizable job state and fence
// checks, a reporter that sends duplicate, conflicting, stale and retried
// reports as a hand-driven worker, and a stale writer that replays old
// tokens against the sinks and the cluster.
//
// Every call is recorded through a history.Recorder as an invoke before it
// is sent and a complete when its answer is in (Caller does this for the
// runner's actors, the Observer for the worker runtime).
package workload
