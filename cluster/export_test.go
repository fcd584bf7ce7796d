package cluster

import "time"

// Hooks for the tests of package cluster_test; compiled into tests only.

// RaftSnapshot has Raft take a snapshot now and waits until it is on disk.
func (n *Node) RaftSnapshot() error { return n.raft.Snapshot().Error() }

// ApplyRaw proposes data as a log entry, unchecked (what a leader with
// damaged memory would send), and returns its index.
func (n *Node) ApplyRaw(data []byte) (uint64, error) {
	f := n.raft.Apply(data, 5*time.Second)
	err := f.Error() // Index is set once Error returns
	return f.Index(), err
}
