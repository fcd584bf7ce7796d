// Package localcluster starts `leasehold server` processes on this
// machine: the one launcher `leasehold bench --start`, the bench's tests
// and the end-to-end tests share, and whose process handling the chaos
// runner (jepsen-lite/runner) shares too.
//
// Ports are bound here, before a node starts, and the node inherits the
// listening sockets (--raft-fd, --api-fd): no port is picked, released and
// bound again, which another process may take in between. A node
// restarted after a kill binds its old addresses again, here too, and a
// port taken meanwhile is said so at once. A build from before those flags
// (the older node of a mixed cluster) is given the addresses to bind.
//
// Process is one run of any command (a server, a worker, `leasehold dev`):
// its own process group, killed with its parent, waited for by one
// goroutine, stopped in order. Env is the environment every child gets:
// this one's without LEASEHOLD_* variables, so a developer's shell never
// points a test's process at another cluster.
//
// The package is not imported by the server or the client: it serves the
// bench and the tests.
package localcluster
