// Package transport owns every byte leasehold puts on the network: how
// connections are opened, secured, told apart and framed. It does not know
// what a lease is or how a cluster is run; it imports no other package of
// the project.
//
// A node listens on one TCP port (its "Raft port") and the Mux splits that
// port in two by the first byte a client sends, after the TLS handshake when
// TLS is on: 0x01 is a Raft stream, 0x02 is a node-to-node RPC. One port means
// one address to advertise, one firewall rule and one TLS setup for both
// protocols. The byte values are part of the wire format: add new ones, never
// renumber.
//
// Mux.RaftLayer is the raft.StreamLayer handed to raft's NetworkTransport.
// The RPC half is a small request/response protocol (RPCServer, RPCClient)
// for cluster operations such as join and node info: length-prefixed JSON
// frames, bounded by MaxFrameSize, with remote failures returned as
// *RPCError carrying a stable code. The public API's protobuf definitions
// and generated code will live here too, so that wire types stay apart from
// the state machine's commands and only package cluster translates between
// the two.
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
// returns only after every goroutine it started has exited.
package transport
