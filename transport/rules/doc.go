// Package rules holds the field rules of leasehold's input, written once:
// the bounds (MaxIDLen, MaxNameLen, ...) and the checks (CheckID,
// CheckName, CheckText, CheckAddr, ...) that the state machine applies to
// every command, the API to every request, and the Go client to its own
// configuration before it sends anything.
//
// It is a leaf: it imports only the standard library, so package fsm and
// package client can both depend on it without either depending on the
// other, and the client still depends on nothing of the server.
//
// A check returns nil or a *FieldError naming the field, which wraps
// ErrInvalid or, for a field longer than its bound, ErrTooLarge. Callers
// that have sentinels of their own (fsm.ErrInvalidArgument) translate.
//
// The rules are part of the log's format: a replica validates every entry
// it decodes, so a rule made stricter would turn entries already committed
// into corrupt ones. Loosen a rule or add a new one; never tighten one.
package rules
