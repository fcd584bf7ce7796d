package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
)

// RPCError is a failure reported by the remote node: its handler refused or
// failed. Anything else Call returns (dial, TLS, timeouts, a broken stream)
// is a local or network failure. Test with errors.As.
type RPCError struct {
	Code    string
	Message string
	Details map[string]string
}

func (e *RPCError) Error() string { return "remote error " + e.Code + ": " + e.Message }

// RPCCode and RPCDetails make an *RPCError a CodedError, so a handler that
// forwards a call to another node passes the remote's answer on unchanged.
func (e *RPCError) RPCCode() string { return e.Code }

// RPCDetails returns a copy of Details.
func (e *RPCError) RPCDetails() map[string]string { return maps.Clone(e.Details) }

// RPCClient calls methods on other nodes' RPCServers, one connection per call.
type RPCClient struct {
	dial func(ctx context.Context, addr, nodeID string) (net.Conn, error)
}

// NewRPCClient returns a client that opens connections with dial, which must
// return a conn ready for frames (type byte sent, TLS done) to the node
// nodeID (any node when empty), as Mux.DialRPC does.
func NewRPCClient(dial func(ctx context.Context, addr, nodeID string) (net.Conn, error)) *RPCClient {
	return &RPCClient{dial: dial}
}

// RPCClient returns a client that dials through the Mux: its Dialer, its
// ClientTLS, and the 0x02 type byte.
func (m *Mux) RPCClient() *RPCClient { return NewRPCClient(m.DialRPC) }

// Call sends req (encoded as JSON) to method on the node at addr and decodes
// the reply into resp, which may be nil to discard it. It returns an
// *RPCError if the remote refused, and a wrapped local or network error
// otherwise; when ctx ended first the error matches ctx.Err().
func (c *RPCClient) Call(ctx context.Context, addr, method string, req, resp any) error {
	return c.CallNode(ctx, addr, "", method, req, resp)
}

// CallNode is Call to the node nodeID at addr: with peer TLS, a remote
// whose certificate names another node is refused before the request is
// sent (ErrWrongPeer).
func (c *RPCClient) CallNode(ctx context.Context, addr, nodeID, method string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("transport: %s: encode request: %w", method, err)
	}
	frame, err := json.Marshal(rpcRequest{Method: method, Body: body})
	if err != nil {
		return fmt.Errorf("transport: %s: encode request: %w", method, err)
	}
	if len(frame) > MaxFrameSize {
		return fmt.Errorf("transport: %s: request of %d bytes: %w", method, len(frame), ErrFrameTooLarge)
	}

	conn, err := c.dial(ctx, addr, nodeID)
	if err != nil {
		return callError(ctx, method, addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	// Cancellation without a deadline: unblock the read by expiring it.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(aLongTimeAgo) })
	defer stop()

	if err := writeFrame(conn, frame); err != nil {
		return callError(ctx, method, addr, err)
	}
	replyFrame, err := readFrame(conn)
	if err != nil {
		return callError(ctx, method, addr, err)
	}
	var reply rpcResponse
	if err := json.Unmarshal(replyFrame, &reply); err != nil {
		return fmt.Errorf("transport: %s to %s: malformed reply: %w", method, addr, err)
	}
	if e := reply.Error; e != nil {
		return &RPCError{Code: e.Code, Message: e.Message, Details: e.Details}
	}
	if resp != nil {
		if err := json.Unmarshal(reply.Body, resp); err != nil {
			return fmt.Errorf("transport: %s to %s: decode reply: %w", method, addr, err)
		}
	}
	return nil
}

// callError wraps a failure of the conversation. If ctx ended, the result
// matches ctx.Err() as well as the I/O error it caused; a conn deadline that
// fired a moment before ctx's own timer counts as the deadline.
func callError(ctx context.Context, method, addr string, err error) error {
	ctxErr := ctx.Err()
	if _, ok := ctx.Deadline(); ok && ctxErr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		ctxErr = context.DeadlineExceeded
	}
	if ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("transport: %s to %s: %w: %w", method, addr, ctxErr, err)
	}
	return fmt.Errorf("transport: %s to %s: %w", method, addr, err)
}
