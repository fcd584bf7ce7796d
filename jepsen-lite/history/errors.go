package history

import "errors"

var (
	// ErrInvalidEntry: an entry lacks a field its kind requires, or
	// carries a payload of another kind.
	ErrInvalidEntry = errors.New("invalid history entry")
	// ErrUnknownKind: an entry's kind is not one this package knows.
	ErrUnknownKind = errors.New("unknown entry kind")
	// ErrFormat: the run entry names a format version this package does
	// not read.
	ErrFormat = errors.New("unsupported history format")
	// ErrMalformed: a line is not a JSON entry.
	ErrMalformed = errors.New("malformed history line")
	// ErrTruncated: the last line has no newline and does not parse: the
	// writer died mid-line. Read returns every entry before it.
	ErrTruncated = errors.New("history truncated mid-line")
	// ErrUnknownOp: Complete named an op id that is not pending.
	ErrUnknownOp = errors.New("no pending op with this id")
	// ErrNotAppendable: invoke and complete entries are written by Invoke
	// and Complete, which own op ids and times, never by Append.
	ErrNotAppendable = errors.New("entry kind not appendable")
	// ErrUnpaired: a complete entry has no invoke, or an op id repeats.
	ErrUnpaired = errors.New("unpaired operation")
)
