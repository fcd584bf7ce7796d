// Package transport owns every byte leasehold puts on the network: how
// connections are opened, secured, told apart and framed. It does not know
// what a lease is or how a cluster is run; it imports no package of the
// project outside its own tree (gen/ for the API's generated code).
//
// A node listens on one TCP port for its peers (the "peer port") and the
// Mux splits it by the first byte a client sends, after the TLS handshake
// when TLS is on: 0x01 is a Raft stream, 0x02 a node-to-node RPC, 0x03 an
// API request a follower forwards to the leader. One port means one address
// to advertise, one firewall rule and one TLS setup for all three. The byte
// values are part of the wire format: add new ones, never renumber.
//
// Who is at the other end is settled at the handshake. Certificates name
// their holder with one URI SAN (identity.go): a server of a cluster, or an
// API client. TLSMaterial.PeerConfigs admits on the peer port only servers
// of this cluster, both ways, and reads the certificate files again on
// Reload; PeerOf and PeerFromContext tell a handler which node a connection
// proved it is, and DialRPC/DialAPI can insist on reaching one node id. The
// package also issues certificates (pki.go) for `leasehold tls`.
//
// Mux.RaftLayer is the raft.StreamLayer handed to raft's NetworkTransport.
// The RPC half is a small request/response protocol (RPCServer, RPCClient)
// for cluster operations such as join, node info and audit records (their
// messages are in peer.go): length-prefixed JSON frames, bounded by
// MaxFrameSize, with remote failures returned as *RPCError carrying a
// stable code; a connection that sends no request within
// RPCServer.IdleTimeout is closed. The public API's
// protobuf definitions and generated code live here too (proto/, gen/), with
// its error reasons (codes.go), so that wire types stay apart from the state
// machine's commands; package cluster/api translates between the two. The
// rules every field of that input follows (bounds, alphabets) live in
// transport/rules, a leaf that fsm, cluster/api and client all check with.
//
// RaftGuard wraps the raft.Transport handed to raft and refuses, before raft
// sees them, Raft messages whose term or log index no real cluster reaches
// (MaxRaftValue and above): raft adds to terms without checking for
// overflow, and one AppendEntries at term 2^64-1 once left a cluster without
// a leader for good. Peer TLS decides who may speak; the guard bounds what
// even a member may say.
//
// No peer can stall another: a client that connects and says nothing is
// dropped after MuxConfig.HandshakeTimeout without holding up the accept
// loop, a call ends when its context does (and a caller that hangs up
// cancels the handler's context), and Close on the Mux or the RPCServer
// returns only after every goroutine it started has exited. LimitListener
// bounds the connections open on the API port, in all and per host.
package transport
