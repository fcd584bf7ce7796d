// Package api serves a node's public API: the Connect services defined in
// transport/proto (which speak Connect, gRPC and gRPC-Web on one port),
// plain HTTP for snapshots (GET and PUT /v1/snapshot), and /livez and
// /readyz.
//
// It translates the wire's messages into the state machine's commands and
// the node's errors into the API's reasons (transport/codes.go); it is part
// of package cluster's side of the house, the only side that translates.
//
// Any node accepts any request. A node that is not the leader forwards the
// request to the leader's API, once (HeaderForwarded marks it), and every
// response carries the leader's address (HeaderLeader) so clients move to
// the leader. Reads are linearizable unless CONSISTENCY_STALE is asked for;
// fence checks always are. With Options.Tokens set, every call needs a
// bearer token whose role allows it.
package api
