package client

import (
	"time"

	"google.golang.org/protobuf/proto"
)

// Observer lets a caller watch the worker runtime from outside: a chaos
// tester records every call it makes and every acknowledgement it counts
// from. Every field is optional. Hooks run on the runtime's goroutines,
// Acknowledged and SelfStopped under its lock: they must return quickly and
// must not call the Worker.
type Observer struct {
	// Call is told about each call the runtime makes to the cluster just
	// before it is sent: the API method ("RegisterWorker", "ListLeases",
	// "StartLease", "Acquire", "Heartbeat", "Report", "Release") and its
	// request. The function it returns, if not nil, is told how the call
	// ended: the method's response message, or the error (a heartbeat
	// abandoned because the next one came due ends with a context error).
	Call func(method string, req proto.Message) func(resp proto.Message, err error)
	// Acknowledged is told the send time, on the worker's Clock, each time
	// the self-stop deadline moves: at registration and at every
	// acknowledged heartbeat, before the heartbeat's verdicts are applied.
	Acknowledged func(sent time.Time)
	// SelfStopped is told the deadline that passed when the watchdog stops
	// every job, before any handler is cancelled.
	SelfStopped func(deadline time.Time)
}

// observe announces a call to the Observer and returns what to tell it
// when the call ends; never nil.
func (o *Observer) observe(method string, req proto.Message) func(proto.Message, error) {
	if o.Call != nil {
		if done := o.Call(method, req); done != nil {
			return done
		}
	}
	return func(proto.Message, error) {}
}

func (o *Observer) acknowledged(sent time.Time) {
	if o.Acknowledged != nil {
		o.Acknowledged(sent)
	}
}

func (o *Observer) selfStopped(deadline time.Time) {
	if o.SelfStopped != nil {
		o.SelfStopped(deadline)
	}
}

// ended tells done how a call ended: the response, or (never a typed nil)
// the error.
func ended[M proto.Message](done func(proto.Message, error), resp M, err error) {
	if err != nil {
		done(nil, err)
		return
	}
	done(resp, nil)
}
