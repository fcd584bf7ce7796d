// Package nemesis breaks a jepsen-lite cluster on a schedule and undoes it:
// partitions (one node, the leader, random halves, one way, and with five
// nodes a majorities ring and a bridge), kill -9 and restart (a node, the
// leader, every node, a worker), SIGSTOP (the leader or every node, past
// grace and past toleration; a worker past toleration), clock faults
// through the chaos build's clock seam (a leader that slept, a cluster
// that slept, a follower's jump, a leader running fast or slow, a leader
// thrown back), proxy delay and loss, leadership transfer, a worker cut
// off from the cluster, the leader isolated together with one worker, and
// an outsider (package outsider) forging joins and Raft messages at every
// node's peer port.
//
// Faults come in families; a run takes one family or several, or "mixed"
// for all. Plan orders them: every kind of the families in turn, in an
// order shuffled by the seed, each held for a time scaled to the cluster's
// timings, with a quiet spell after each. Nemesis carries a plan out on a
// Cluster (the runner's processes and network), recording every fault's
// start and stop in the history, and HealAll undoes whatever is still
// broken at the end.
package nemesis
