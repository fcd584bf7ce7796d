package transport

import "errors"

// Sentinel errors. Callers test them with errors.Is; a failure reported by
// the remote node is not one of these but an *RPCError.
var (
	// ErrClosed: the Mux, one of its listeners, or the RPCServer is closed.
	// Accept on a closed sub-listener also matches net.ErrClosed, so loops
	// written for plain listeners stop on it.
	ErrClosed = errors.New("transport closed")
	// ErrFrameTooLarge: an RPC message is longer than MaxFrameSize. The
	// connection that carried its header is closed, because the rest of the
	// stream can no longer be framed.
	ErrFrameTooLarge = errors.New("rpc frame too large")
	// ErrInvalidConfig: NewMux was given a config it cannot run with. The
	// error names the field and the value.
	ErrInvalidConfig = errors.New("invalid transport config")
	// ErrWrongPeer: a dialed node's certificate names another node than
	// the one the caller meant to reach.
	ErrWrongPeer = errors.New("peer is not the node expected")
	// ErrRaftRPCRefused: a RaftGuard refused a Raft message whose term or
	// log index is out of bounds, or whose type raft never sends. The error
	// names the field and the value; the sender receives it as text.
	ErrRaftRPCRefused = errors.New("raft rpc refused")
)
