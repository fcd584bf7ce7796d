package transport

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// MaxFrameSize bounds one RPC message body in bytes, so a bad or hostile
// peer cannot make a node allocate more than this per connection.
const MaxFrameSize = 1 << 20

// Wire codes the RPC layer itself produces. Handlers add their own.
const (
	// CodeUnknownMethod: no handler is registered for the method.
	CodeUnknownMethod = "unknown_method"
	// CodeInternal: the handler failed with an error that carries no code,
	// or its reply could not be sent.
	CodeInternal = "internal"
)

// rpcRequest is the body of a request frame.
type rpcRequest struct {
	Method string          `json:"method"`
	Body   json.RawMessage `json:"body,omitempty"`
}

// rpcResponse is the body of a response frame: Body or Error, never both.
type rpcResponse struct {
	Body  json.RawMessage `json:"body,omitempty"`
	Error *wireError      `json:"error,omitempty"`
}

type wireError struct {
	Code    string            `json:"code"`
	Message string            `json:"message"`
	Details map[string]string `json:"details,omitempty"`
}

// writeFrame writes the length prefix and body in one Write, so a TLS conn
// sends one record rather than two.
func writeFrame(w io.Writer, body []byte) error {
	if len(body) > MaxFrameSize {
		return fmt.Errorf("%w: %d bytes exceeds %d", ErrFrameTooLarge, len(body), MaxFrameSize)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err := w.Write(buf)
	return err
}

// readFrame reads one frame, refusing a length over MaxFrameSize before
// allocating for it.
func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return nil, fmt.Errorf("%w: header says %d bytes, limit %d", ErrFrameTooLarge, n, MaxFrameSize)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the header promised a body
		}
		return nil, err
	}
	return body, nil
}
