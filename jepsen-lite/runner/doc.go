// Package runner carries out jepsen-lite runs: it places the nodes on a
// network (netem: namespaces as root, proxies otherwise), starts them from
// a leasehold binary built with -tags chaos, starts worker processes (the
// jepsen-lite binary re-executed as "worker") and the runner's own actors
// (submitter, reader, stale writer, reporter, the sinks), runs a nemesis
// plan, heals, lets orphaned leases be taken again, drains, reads every
// node's final state and the whole event log, stops everything in order,
// merges the histories by CLOCK_MONOTONIC time, and runs the checkers.
// A secure run (Config.Secure) first makes a CA, the nodes' certificates
// and the tokens under the run's pki/ (pki.go); otherwise the nodes run
// --insecure. A run with the outsider family puts an outsider (package
// outsider) on an address of its own for the nemesis to set on the nodes.
// A run with the disk family puts each node's data dir on a tmpfs of its
// own (package disk; root only, skipped with a note otherwise), copied to
// data/ and unmounted at the end. A run with Config.Flood starts the flood
// (workload.Flood) beside the load, from another address of its own, and
// stops it with the load; the final states also sum up each node's event
// log, for F1. A run with Config.ShellWorkers starts shell workers beside
// the Go workers: `leasehold worker run` of the chaos build, state under
// the run's state/, running `jepsen-lite shell-job` for each job (package
// workload); each command's history file is merged with the others.
//
// A run's phases, in a history's terms:
//
//	run                      settings and timings
//	leader_elected           the first leader
//	... load, fault_start/fault_stop pairs (node_ready after a
//	    disk fault's stop), flood_call beside the load ...
//	fault_start kill-worker  (optional) a busy worker killed for good
//	heal, leader_elected     every fault undone, a leader again
//	... load for toleration + grace: orphans are re-leased ...
//	cancel_submitter         the early executor gives up its queue
//	... drain: every job terminal ...
//	final_state × nodes      each node's jobs, state hash, term,
//	                         membership and event log, at one applied
//	                         index
//	run_end                  whether the event log was read whole
//
// Profiles are series of runs: "ci" runs the real build under each fault
// family and the broken builds (Builds: each turns one guarantee off)
// under the fault that exposes each; a broken build's run passes only if
// an expected checker catches it. After the table of runs, a table of
// checkers says which broken builds each caught, and which checkers no
// broken build exercises; the profile's directory gets a report.json of
// both. "soak" is one long mixed run at production timings on five nodes.
//
// Its processes are internal/localcluster's, the launcher the bench and the
// end-to-end tests use; the nodes are not that launcher's clusters, as they
// sit on the network netem built (fixed ports on addresses of their own, in
// namespaces), not on loopback ports, and a fault must reach one process,
// one incarnation after another.
//
// Every process the runner starts dies with it (parent-death signal), and
// Run tears down the network it built also when its context is cancelled;
// `jepsen-lite clean` removes what a runner killed with SIGKILL left.
package runner
