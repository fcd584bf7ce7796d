// Package nemesis breaks a jepsen-lite cluster on a schedule and undoes it:
// partitions (one node, the leader, random halves, one way, and with five
// nodes a majorities ring and a bridge), kill -9 and restart (a node, the
// leader, every node, a worker), SIGSTOP (the leader or every node, past
// grace and past toleration; a worker past toleration), clock faults
// through the chaos build's clock seam (a leader that slept, a cluster
// that slept, a follower's jump, a leader running fast or slow, a leader
// thrown back), proxy delay and loss, leadership transfer, a worker cut
// off from the cluster, the leader isolated together with one worker, an
// outsider (package outsider) forging joins and Raft messages at every
// node's peer port, and a full disk under a follower or the leader (each
// node's data dir on a small tmpfs of its own, package disk, filled to the
// last byte and freed; the fault's end waits until the node says it is
// ready again and records when), and for shell workers (`leasehold worker
// run`) a kill -9 of the worker run process alone (its supervisors and
// commands run on; it comes back within the self-stop deadline, after it,
// or after the expiry) and a reboot (its supervisors and commands killed
// with it).
//
// Faults come in families; a run takes one family or several, or "mixed"
// for all but the shell family (a run has shell workers only when asked). Plan orders them: every kind of the families in turn, in an
// order shuffled by the seed, each held for a time scaled to the cluster's
// timings, with a quiet spell after each. Nemesis carries a plan out on a
// Cluster (the runner's processes and network), recording every fault's
// start and stop in the history, and HealAll undoes whatever is still
// broken at the end.
package nemesis
