package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/transport"
	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// RegisterWorker says the worker's version. A server from before worker
// versions refuses the unknown field (strict decoding); the client then
// registers without it, once. Any other refusal is the caller's.
func TestRegisterWorkerSaysItsVersion(t *testing.T) {
	node := newFakeNode(t)
	var old atomic.Bool
	old.Store(true)
	node.on("RegisterWorker", func(_ context.Context, msg proto.Message, _ http.Header) (proto.Message, error) {
		req := msg.(*leaseholdv1.RegisterWorkerRequest)
		switch {
		case req.GetCapacity() > 100:
			return nil, transport.NewError(transport.ReasonInvalidArgument, errors.New("capacity: too large"),
				&leaseholdv1.ErrorDetail{Field: "capacity"})
		case old.Load() && req.GetVersion() != "":
			return nil, transport.NewError(transport.ReasonInvalidArgument,
				errors.New("3: unknown field number 3 of leasehold.v1.RegisterWorkerRequest"), &leaseholdv1.ErrorDetail{Field: "3"})
		}
		return &leaseholdv1.RegisterWorkerResponse{Worker: &leaseholdv1.Worker{Id: req.GetWorkerId(), Version: req.GetVersion()}}, nil
	})
	c := newClientWith(t, client.Config{Endpoints: []string{node.addr}, WorkerVersion: "v1.2.3"})
	versions := func() []string {
		var out []string
		for _, r := range node.requests("RegisterWorker") {
			out = append(out, r.msg.(*leaseholdv1.RegisterWorkerRequest).GetVersion())
		}
		return out
	}

	resp, err := c.RegisterWorker(context.Background(), "w1", 2)
	if err != nil || resp.GetWorker().GetVersion() != "" {
		t.Fatalf("register with an old server: %v %v", resp, err)
	}
	if got := versions(); len(got) != 2 || got[0] != "v1.2.3" || got[1] != "" {
		t.Fatalf("versions sent to an old server: %q, want the version, then none", got)
	}

	old.Store(false)
	resp, err = c.RegisterWorker(context.Background(), "w1", 2)
	if err != nil || resp.GetWorker().GetVersion() != "v1.2.3" {
		t.Fatalf("register with a new server: %v %v", resp, err)
	}
	if got := versions(); len(got) != 3 || got[2] != "v1.2.3" {
		t.Fatalf("versions sent: %q", got)
	}

	_, err = c.RegisterWorker(context.Background(), "w1", 1000)
	var e *client.Error
	if !errors.As(err, &e) || e.Field != "capacity" || len(versions()) != 4 {
		t.Fatalf("another refusal: %v after %d requests, want it returned after one", err, len(versions())-3)
	}

	if _, err := client.New(client.Config{WorkerVersion: "v 1"}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("a version with a space: %v", err)
	}
}
