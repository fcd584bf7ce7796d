// Package clustertest runs real leasehold nodes in one test process: Raft
// with raft-boltdb in temporary directories, real TCP over loopback (each
// node on its own 127.0.0.x address, so links between two nodes can be cut),
// and a fake clock per node that drives the leader's expiry table.
//
// Tests wait on conditions (WaitFor, Leader, Converged), never on sleeps.
// Step and Run advance one node's clock and wait until its expiry loop has
// processed the step, so "no lease expires before toleration" is a
// statement about a number of steps, not about a machine's speed.
package clustertest
