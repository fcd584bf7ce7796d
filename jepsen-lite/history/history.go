package history

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Read decodes a JSON Lines history. Unknown fields, unknown kinds and
// entries that fail Validate are errors naming the line: a runner that
// writes a field the checkers do not read should hear about it. If only the
// last line is cut short (no newline, not JSON), Read returns every entry
// before it with ErrTruncated.
func Read(r io.Reader) ([]Entry, error) {
	br := bufio.NewReader(r)
	var out []Entry
	for line := 1; ; line++ {
		raw, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return out, fmt.Errorf("history: line %d: %w", line, err)
		}
		atEOF := err != nil
		complete := len(raw) > 0 && raw[len(raw)-1] == '\n'
		if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 {
			e, derr := decodeLine(trimmed)
			switch {
			case derr == nil:
				out = append(out, e)
			case !complete && errors.Is(derr, ErrMalformed):
				return out, fmt.Errorf("history: line %d: %w", line, ErrTruncated)
			default:
				return out, fmt.Errorf("history: line %d: %w", line, derr)
			}
		}
		if atEOF {
			return out, nil
		}
	}
}

func decodeLine(raw []byte) (Entry, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var e Entry
	if err := dec.Decode(&e); err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return Entry{}, fmt.Errorf("%w: more than one value on the line", ErrMalformed)
	}
	if err := e.Validate(); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// Write encodes entries as JSON Lines, as a Recorder would have.
func Write(w io.Writer, entries []Entry) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range entries {
		if err := enc.Encode(&entries[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Operation is an invoke paired with its complete.
type Operation struct {
	Index         int // the invoke's index in the entries
	CompleteIndex int // the complete's index, -1 if none
	Process       string
	ID            uint64
	Name          string
	Input         Input
	Status        Status
	Reason        string
	Output        Output
	InvokeNs      int64
	// CompleteNs is when the answer came; math.MaxInt64 when none came.
	// An info op's effect may land after its CompleteNs: use EffectByNs.
	CompleteNs int64
}

// EffectByNs is the latest time op's effect can have happened: when it
// answered, or never bounded (math.MaxInt64) for an unknown outcome.
func (op *Operation) EffectByNs() int64 {
	if op.Status == StatusInfo {
		return math.MaxInt64
	}
	return op.CompleteNs
}

// Operations pairs every invoke with its complete, by (process, op_id), in
// the order of the invokes. An invoke that never completed is an info op
// with reason "no completion". A complete without its invoke, or an op id
// invoked twice by one process, is ErrUnpaired.
func Operations(entries []Entry) ([]Operation, error) {
	type key struct {
		process string
		id      uint64
	}
	byKey := make(map[key]int)
	var ops []Operation
	for i := range entries {
		e := &entries[i]
		if e.Op == nil {
			continue
		}
		k := key{e.Process, e.Op.ID}
		switch e.Kind {
		case KindInvoke:
			if _, dup := byKey[k]; dup {
				return nil, fmt.Errorf("%w: %s op %d invoked twice (entry %d)", ErrUnpaired, e.Process, e.Op.ID, i)
			}
			op := Operation{Index: i, CompleteIndex: -1, Process: e.Process, ID: e.Op.ID, Name: e.Op.Name,
				Status: StatusInfo, Reason: "no completion", InvokeNs: e.Ns, CompleteNs: math.MaxInt64}
			if e.Op.Input != nil {
				op.Input = *e.Op.Input
			}
			byKey[k] = len(ops)
			ops = append(ops, op)
		case KindComplete:
			j, ok := byKey[k]
			if !ok || ops[j].CompleteIndex >= 0 {
				return nil, fmt.Errorf("%w: %s op %d completed without a pending invoke (entry %d)", ErrUnpaired, e.Process, e.Op.ID, i)
			}
			op := &ops[j]
			op.CompleteIndex, op.Status, op.Reason, op.CompleteNs = i, e.Op.Status, e.Op.Reason, e.Ns
			if e.Op.Output != nil {
				op.Output = *e.Op.Output
			}
		}
	}
	return ops, nil
}

// HashJobs is the state hash runners should put in FinalState.StateHash
// when the cluster offers none: a SHA-256 over the last token and every
// job summary, sorted by id and with leases as given. Two nodes with the
// same jobs hash alike whatever order their listings came in.
func HashJobs(lastToken uint64, jobs []JobSummary) string {
	sorted := slices.Clone(jobs)
	slices.SortFunc(sorted, func(a, b JobSummary) int { return strings.Compare(a.ID, b.ID) })
	h := sha256.New()
	fmt.Fprintf(h, "last_token=%d\n", lastToken)
	enc := json.NewEncoder(h)
	for i := range sorted {
		// A JobSummary always encodes: it holds only strings, numbers and
		// slices of them.
		_ = enc.Encode(&sorted[i])
	}
	return hex.EncodeToString(h.Sum(nil))
}
