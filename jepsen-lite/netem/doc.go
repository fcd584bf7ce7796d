// Package netem is jepsen-lite's network: where every node, worker and the
// runner sit, and the faults the nemesis can inject between them.
//
// Two implementations share the Network interface:
//
//   - Netns (root, with ip and iptables): each node runs in a network
//     namespace of its own with its own address on a bridge in the root
//     namespace; the runner and each worker process have an address of
//     their own on the bridge. A partition is iptables DROP rules inside
//     the nodes' namespaces, per peer address, so a node is a real host
//     whose packets vanish. Delay and loss are not available (the kernel
//     has no netem here).
//   - Proxy (no privileges): every node binds loopback addresses of its
//     own and advertises a TCP proxy in front of each of its ports. The
//     node dials peers from its own address, and workers and the runner
//     from theirs, so a proxy knows who is talking and can hold back
//     (cut), delay, or lose (hold back for a retransmission timeout) each
//     direction of each pair of endpoints.
//
// Endpoints are named "n1".."n5" (nodes), "w1".. (worker processes) and
// "runner". A link is one direction between two of them.
package netem
