// Package api serves a node's public API: the Connect services defined in
// transport/proto (which speak Connect, gRPC and gRPC-Web on one port),
// plain HTTP for snapshots (GET and PUT /v1/snapshot), and /livez and
// /readyz.
//
// It translates the wire's messages into the state machine's commands and
// the node's errors into the API's reasons (transport/codes.go); it is part
// of package cluster's side of the house, the only side that translates.
//
// Who may call what is decided in one place (auth.go): an HTTP middleware
// that authenticates the caller (a bearer token, a verified client
// certificate, or, on the peer port, the member that forwarded the request
// vouching for its caller) and checks the role against the path, before
// any handler runs and before any body is read.
//
// What a request may say is decided before anything is proposed or
// forwarded: the codecs refuse fields and enum values the schema does not
// name (decode.go; a binary request is cleared from its wire bytes,
// wirecheck.go, and only what that cannot clear is walked field by field;
// a heartbeat stream's beat of the usual shape is decoded in place into
// the message of the stream's previous beat, beatdecode.go, and anything
// else goes the general way),
// each handler's translation refuses missing fields and
// what its command cannot say, and the command is validated against the
// field rules of transport/rules. Every refusal is INVALID_ARGUMENT or
// TOO_LARGE naming the field in its ErrorDetail.
//
// Any node accepts any request. A node that is not the leader forwards the
// request to the leader over the peer port, once (HeaderForwarded marks
// it), never to an address a reply or the node table could name; every
// response carries the leader's API address (HeaderLeader) so clients move
// to the leader. Reads are linearizable unless CONSISTENCY_STALE is asked
// for; fence checks always are. Admin actions are audited with the
// caller's identity.
//
// A heartbeat stream (heartbeats.go) has a reader that decodes, checks
// and records each beat, and an answerer that confirms the leadership
// once per batch of beats and answers each; a write deadline that the
// answerer keeps ahead of its writes (answerDeadline) ends a stream whose
// client stops reading.
//
// How much a request may cost is bounded before its handler runs
// (limits.go): its length, its rate per credential, the connections per
// host, and the time its body may take to arrive. An HTTP/1.1 body has a
// read deadline on its connection; every HTTP/2 body is timed by one watch
// per server (bodywatch.go), which cuts a stream whose body has not ended
// by its deadline, so a call sets no read timer of its own.
//
// Without TLS the server reads each connection through a buffer of its
// own (bufconn.go), since net/http's HTTP/2 server would otherwise make
// two system calls per frame; a TLS connection buffers its records itself.
package api
