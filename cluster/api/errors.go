package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/cluster"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport"
	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
	"github.com/leasehold/leasehold/transport/rules"
)

// errorTable maps the node's and the state machine's sentinels to the
// API's reasons. Order matters only where one error matches two entries.
var errorTable = []struct {
	err    error
	reason string
}{
	{cluster.ErrNotLeader, transport.ReasonNotLeader},
	{cluster.ErrNoLeader, transport.ReasonNoLeader},
	{cluster.ErrNotReady, transport.ReasonNotReady},
	{cluster.ErrShutdown, transport.ReasonShuttingDown},
	{cluster.ErrLeadershipLost, transport.ReasonOutcomeUnknown},
	{cluster.ErrTimeout, transport.ReasonTimeout},
	{cluster.ErrUnreachable, transport.ReasonUnreachable},
	{cluster.ErrInvalidSnapshot, transport.ReasonInvalidArgument},
	{fsm.ErrInvalidArgument, transport.ReasonInvalidArgument},
	{fsm.ErrTooLarge, transport.ReasonTooLarge},
	{rules.ErrInvalid, transport.ReasonInvalidArgument},
	{rules.ErrTooLarge, transport.ReasonTooLarge},
	{fsm.ErrNotFound, transport.ReasonNotFound},
	{fsm.ErrConflict, transport.ReasonConflict},
	{fsm.ErrStaleToken, transport.ReasonStaleToken},
	{fsm.ErrNotOwner, transport.ReasonNotOwner},
	{fsm.ErrUnknownWorker, transport.ReasonUnknownWorker},
	{fsm.ErrFinished, transport.ReasonJobFinished},
	{fsm.ErrNotDead, transport.ReasonJobNotDead},
	{fsm.ErrTokensExhausted, transport.ReasonTokensExhausted},
	{errUnauthenticated, transport.ReasonUnauthenticated},
	{errForbidden, transport.ReasonForbidden},
	{errPeerOnly, transport.ReasonForbidden},
	{errHostNotAllowed, transport.ReasonForbidden},
	{errRateLimited, transport.ReasonRateLimited},
	{cluster.ErrQuotaExceeded, transport.ReasonQuotaExceeded},
	{cluster.ErrDiskFull, transport.ReasonDiskFull},
	{cluster.ErrUpgradeRequired, transport.ReasonUpgradeRequired},
	{context.DeadlineExceeded, transport.ReasonTimeout},
}

// toWire turns any error of a handler into an API error with a reason and
// details. A *connect.Error (a forwarded call's answer) passes unchanged.
func toWire(err error) error {
	if err == nil {
		return nil
	}
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		return cerr
	}
	if errors.Is(err, context.Canceled) {
		// The caller hung up (it will not read this) or the server is
		// shutting down (HTTPServer.Shutdown cancels requests in flight):
		// either way the answer is "try another node".
		return transport.NewError(transport.ReasonShuttingDown, err, nil)
	}
	detail := &pb.ErrorDetail{}
	var nl *cluster.NotLeaderError
	if errors.As(err, &nl) {
		detail.LeaderId, detail.LeaderApi = nl.LeaderID, nl.LeaderAPI
	}
	var fe *fsm.FieldError
	var re *rules.FieldError
	switch {
	case errors.As(err, &fe):
		detail.Field = fe.Field
	case errors.As(err, &re):
		detail.Field = re.Field
	}
	var df *cluster.DiskFullError
	if errors.As(err, &df) {
		detail.NodeId = df.NodeID
	}
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return transport.NewError(e.reason, err, detail)
		}
	}
	return transport.NewError(transport.ReasonInternal, err, detail)
}
