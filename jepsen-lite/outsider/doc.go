// Package outsider is a process on the run's network that is no member of
// the cluster and tries to change it through the nodes' peer ports, as an
// attacker on the same network would. It is the outsider nemesis's actor:
// every attempt is recorded in the history (outsider_attempt), and checker
// O1 proves from the history and the final states that none changed
// anything.
//
// At every node, from its own address, it sends:
//
//   - a join under a new id at its own Raft address (join-stranger);
//   - the address takeover: a join naming the leader's id and Raft address
//     with its capture server as the API address (join-takeover), which,
//     taken, would have followers forward callers' requests, and clients
//     follow leader hints, to the capture server;
//   - a join naming a live member's id at its own Raft address, where it
//     answers peer.info as that member (join-impostor);
//   - AppendEntries and RequestVote with term 2^64-1, through a
//     raft.NetworkTransport over a transport.Mux, as a member would send
//     them (raft-append, raft-vote).
//
// In a secure run (peer mutual TLS) it sends them all again over TLS with
// an API client certificate of the cluster's own CA, which the API takes
// and the peer port must not, and adds, both ways, AppendEntries and
// RequestVote with a term in range and TimeoutNow: nothing without a
// server certificate of the cluster may reach Raft at all. In an insecure
// run it sends no Raft message a node must take: an open peer port accepts
// in-range Raft messages from anyone by design, which is what --insecure
// gives up.
//
// Its capture server records every connection it receives
// (outsider_capture): its address is only ever offered by the attacks, so
// any connection means one of them took.
package outsider
