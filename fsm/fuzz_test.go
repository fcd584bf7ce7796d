package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// splitEntries cuts a fuzz input into log entries, each prefixed by a
// uvarint length.
func splitEntries(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 && len(out) < 64 {
		n, k := binary.Uvarint(data)
		if k <= 0 || n > uint64(len(data)-k) {
			return append(out, data)
		}
		out = append(out, data[k:k+int(n)])
		data = data[k+int(n):]
	}
	return out
}

func joinEntries(entries ...[]byte) []byte {
	var out []byte
	for _, e := range entries {
		out = binary.AppendUvarint(out, uint64(len(e)))
		out = append(out, e...)
	}
	return out
}

// FuzzDecodeApply: any input either fails to decode cleanly, or applies
// without panicking and leaves every invariant intact; entries of both
// codec versions.
func FuzzDecodeApply(f *testing.F) {
	// A busy state, restored fresh for every input so the commands meet
	// jobs, leases and workers in every state.
	base := snapshotBytes(f, busyMachine(f).f)
	var seeds [][]byte
	for _, c := range sampleCommands() {
		seeds = append(seeds, mustEncode(f, c))
	}
	for _, c := range []Command{
		&Acquire{WorkerID: "w1", RequestID: "fz", Queues: []string{"default"}, Max: 5},
		&Report{WorkerID: "w1", JobID: "job-001", Token: 2, ReportID: "fz", Outcome: OutcomeSucceeded},
		&Expire{Leases: []LeaseRef{{"job-004", 5}, {"job-010", 11}}},
		&Cancel{JobID: "job-007", Kill: true},
		&CancelSubmitter{Submitter: "exec-a", Limit: 3},
		&DeregisterWorker{WorkerID: "w2"},
		&Compact{JobsBefore: 1 << 62, EventsBefore: 1 << 62, Limit: 50},
	} {
		seeds = append(seeds, mustEncode(f, c))
	}
	// Entries of logs written before the checksum, which decode too.
	for _, c := range sampleCommands() {
		seeds = append(seeds, encodeV1(f, 1, c))
	}
	for _, s := range seeds {
		f.Add(joinEntries(s))
	}
	f.Add(joinEntries(seeds...))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := New()
		if err := fsm.Restore(bytes.NewReader(base)); err != nil {
			t.Fatal(err)
		}
		index := fsm.LastIndex()
		for _, entry := range splitEntries(data) {
			// Re-seal version 2 entries, so mutations reach the command
			// decoders instead of all stopping at the checksum (which
			// TestChecksumRefusesEveryFlippedBit covers).
			if len(entry) > checksumLen && entry[0] == codecV2 {
				entry = seal(entry[:len(entry)-checksumLen])
			}
			index++
			_, err := fsm.Apply(index, entry)
			if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnknownCommand) {
				continue
			}
			if err := fsm.CheckInvariants(); err != nil {
				t.Fatalf("invariants after entry %x: %v", entry, err)
			}
		}
	})
}

// FuzzRestore: any byte stream either fails to restore with ErrCorrupt, or
// restores a state that keeps every invariant (restore checks them itself).
// A stream that restores is also prepared for a cluster's restore: it is
// refused naming a field, or its copy restores with the cluster's index and
// at least the floor.
func FuzzRestore(f *testing.F) {
	base := snapshotBytes(f, busyMachine(f).f)
	f.Add(base)
	f.Add(base[:len(base)/2])
	f.Add(append([]byte(snapMagic), snapVersion))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Re-seal the checksum so mutations reach the record decoders
		// instead of all stopping at the CRC.
		if n := len(data); n > 5 && data[n-5] == tagEnd {
			data = bytes.Clone(data)
			binary.LittleEndian.PutUint32(data[n-4:], crc32.Checksum(data[:n-4], castagnoli))
		}
		fsm := New()
		err := fsm.Restore(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("restore failed without ErrCorrupt: %v", err)
			}
			return
		}
		if err := fsm.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		plan := RestorePlan{Index: 1000, Floor: 1 << 40, Latest: 1 << 61}
		var out bytes.Buffer
		if _, err := PrepareRestore(&out, bytes.NewReader(data), plan); err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("prepare failed without ErrInvalidArgument: %v", err)
			}
			return
		}
		g := New()
		if err := g.Restore(&out); err != nil {
			t.Fatalf("prepared copy refused: %v", err)
		}
		if st := g.Stats(); st.LastIndex != plan.Index || st.LastToken < plan.Floor {
			t.Fatalf("prepared copy at index %d token %d", st.LastIndex, st.LastToken)
		}
	})
}
