package rules

import (
	"errors"
	"fmt"
)

// Sentinels a *FieldError wraps. Callers test them with errors.Is.
var (
	// ErrInvalid: a field breaks its rule (empty, a byte out of its
	// alphabet, a value out of its range).
	ErrInvalid = errors.New("invalid argument")
	// ErrTooLarge: a field or a list is longer than its bound.
	ErrTooLarge = errors.New("too large")
)

// FieldError is a check's failure: the field, as the caller named it, and
// why. It wraps ErrTooLarge when TooLarge, ErrInvalid otherwise.
type FieldError struct {
	Field    string
	Reason   string
	TooLarge bool
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns the sentinel: ErrTooLarge or ErrInvalid.
func (e *FieldError) Unwrap() error {
	if e.TooLarge {
		return ErrTooLarge
	}
	return ErrInvalid
}

// Invalid is a failure of field's rule, the reason formatted from format
// and args.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// TooLong is field's length n over its bound max.
func TooLong(field string, n, max int) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf("length %d exceeds %d", n, max), TooLarge: true}
}
