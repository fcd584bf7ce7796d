package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// sampleCommands has one fully populated command of every type.
func sampleCommands() []Command {
	s := spec("job-1")
	s.Priority, s.Submitter, s.OnWorkerLost = -7, "exec", LostFail
	return []Command{
		&RegisterWorker{WorkerID: "w1", Capacity: 4},
		&RegisterWorker{WorkerID: "w2", Capacity: 2, Version: "v1.2.3-rc.1+abc"},
		&DeregisterWorker{WorkerID: "w1"},
		&DeregisterWorker{WorkerID: "w1", Lost: true},
		&SubmitJob{Spec: s},
		&Acquire{WorkerID: "w1", RequestID: "r1", Queues: []string{"a", "b"}, Kinds: []string{"run"}, Max: 3, Start: true},
		&Start{WorkerID: "w1", JobID: "job-1", Token: 42},
		&Report{WorkerID: "w1", JobID: "job-1", Token: 42, ReportID: "rep", Outcome: OutcomeFailed, Retryable: true, Ref: "commit abc", Message: "exit 3\nsee log"},
		&Release{WorkerID: "w1", JobID: "job-1", Token: 42, Reason: "shutdown"},
		&Release{WorkerID: "w1", JobID: "job-1", Token: 42, Reason: "command gone", Lost: true},
		&Cancel{JobID: "job-1", Kill: true, Reason: "user"},
		&CancelSubmitter{Submitter: "exec", Limit: 100, Reason: "executor stopped"},
		&Expire{Leases: []LeaseRef{{"job-1", 42}, {"job-2", 43}}, Reason: "toleration"},
		&Compact{JobsBefore: 1e18, EventsBefore: -5, Limit: 10},
		&RaiseTokenFloor{Floor: 1 << 40},
		&RecordEvent{Event: EventWorkerUnreachable, WorkerID: "w1", Detail: "silent 50s"},
		&SetNode{NodeID: "node-1", RaftAddr: "10.0.0.1:7000", APIAddr: "[::1]:7001"},
		&SetNode{NodeID: "node-1", RaftAddr: "10.0.0.1:7000", APIAddr: "[::1]:7001", Level: 4, Version: "v0.9.0"},
		&RemoveNode{NodeID: "node-1"},
		&RecordEvents{Events: []RecordEvent{{Event: EventWorkerReachable, WorkerID: "w2"}, {Event: EventAbsenceRule, Detail: "gap"}}},
		&Audit{Action: "cluster.join", Actor: "leasehold://prod/server/node-4", Source: "10.0.0.4:51234", Detail: "node-4: refused"},
		&RemoveIdle{WorkerIDs: []string{"w1", "w2"}, Reason: "silent past 1h0m0s, holding nothing"},
		&PutSchedule{Name: "nightly", Cron: "0 2 * * *", Zone: "Europe/Paris", Missed: MissedRunLatest, Replace: true,
			Template: JobSpec{Queue: "a", Kind: "run", Payload: []byte("x"), Submitter: "exec", MaxAttempts: 3, OnWorkerLost: LostFail,
				MaxWorkerLosses: 2, Priority: -2, Retry: &RetryPolicy{Initial: 1e9, Max: 6e10, Multiplier: 2000, Jitter: 10}}},
		&PutSchedule{Name: "nightly", PauseOnly: true, Paused: true, Owner: "ci"},
		&DeleteSchedule{Name: "nightly", Owner: "ci"},
		&FireSchedule{Name: "nightly", Slot: 1_700_000_000e9, Skip: true, Skipped: 3, Reason: "missed"},
		&RetryJob{JobID: "job-1", Reason: "fixed the bug"},
		&PurgeJobs{JobIDs: []string{"job-1", "job-2"}, Limit: 2, Reason: "triaged"},
		&PurgeJobs{Queue: "mail", OlderThan: 7 * 24 * 3600e9, Limit: MaxPurgeBatch},
		&SetQueue{Queue: "emails", SetPaused: true, Paused: true},
		&SetQueue{Queue: "emails", SetPaused: true, SetMaxRunning: true, MaxRunning: 12},
		&SubmitJob{Spec: s, RunAt: 5, TimeoutMs: MaxTimeout},
		&TimeOut{Leases: []LeaseRef{{"job-1", 42}, {"job-2", 43}}},
	}
}

// RetryJob and PurgeJobs exist only from codec 6: an older build stops at
// them, so the cluster proposes them only at level 6.
func TestDeadLetterCommandsAreCodec6(t *testing.T) {
	for _, c := range []Command{&RetryJob{JobID: "j"}, &PurgeJobs{Queue: "q", Limit: 1}} {
		data, err := Encode(7, c)
		if err != nil || data[0] != codecV6 || CodecOf(c) != codecV6 {
			t.Fatalf("%T: codec %d (CodecOf %d), want 6 (%v)", c, data[0], CodecOf(c), err)
		}
	}
	if Level < codecV6 {
		t.Fatalf("this build's level %d does not cover codec 6", Level)
	}
}

func TestCodecRoundTripEveryCommand(t *testing.T) {
	seen := map[CommandType]bool{}
	for _, c := range sampleCommands() {
		data, err := Encode(-123456789, c)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		env, err := Decode(data)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if env.Time != -123456789 || !reflect.DeepEqual(env.Command, c) {
			t.Fatalf("%T: decoded %+v at %d", c, env.Command, env.Time)
		}
		// Deterministic: the same command encodes to the same bytes.
		again, _ := Encode(-123456789, env.Command)
		if string(again) != string(data) {
			t.Fatalf("%T: encoding not canonical", c)
		}
		// Every strict prefix fails cleanly.
		for i := 0; i < len(data); i++ {
			if _, err := Decode(data[:i]); err == nil {
				t.Fatalf("%T: prefix of %d bytes decoded", c, i)
			}
		}
		if _, err := Decode(append(data, 0)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%T: trailing byte: %v", c, err)
		}
		seen[c.Type()] = true
	}
	for typ := range commandFactories {
		if !seen[typ] {
			t.Errorf("command type %d has no sample", typ)
		}
	}
}

func TestDecodeRefusals(t *testing.T) {
	valid, _ := Encode(1, &Start{WorkerID: "w", JobID: "j", Token: 1})
	long := strings.Repeat("x", MaxIDLen+1)
	// A command that passes the decoder's bounds but not validation.
	e := encoder{}
	e.byte1(codecV1)
	e.byte1(uint8(CmdStart))
	e.varint(1)
	(&Start{WorkerID: "w", JobID: "j", Token: 0}).encode(&e)
	zeroToken := e.b
	// A string longer than its bound.
	e = encoder{}
	e.byte1(codecV1)
	e.byte1(uint8(CmdDeregisterWorker))
	e.varint(1)
	e.str(long)
	tooLong := e.b

	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"version", append([]byte{9}, valid[1:]...), ErrCorrupt},
		{"unknown type", seal(append([]byte{codecV2, 200}, valid[2:len(valid)-checksumLen]...)), ErrUnknownCommand},
		{"zero token", zeroToken, ErrCorrupt},
		{"string over bound", tooLong, ErrCorrupt},
		{"huge length prefix", []byte{codecV1, uint8(CmdDeregisterWorker), 2, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrCorrupt},
		{"zero token, sealed", seal(append([]byte{codecV2}, zeroToken[1:]...)), ErrCorrupt},
		{"checksum only", []byte{codecV2, 0, 0, 0, 0}, ErrCorrupt},
		{"shorter than a checksum", []byte{codecV2, 1, 2}, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Decode(tc.data); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// A command is written in the oldest codec version that carries it: a
// registration without a version byte for byte as version 2 wrote it (so
// a binary from before version 3 still reads it), one with a version in
// version 3. Entries of every version decode; the version, not the
// length, says whether the field is there.
func TestCodecVersion3OnlyWhenNeeded(t *testing.T) {
	// Version 2's registration, as it was written before version 3.
	e := encoder{}
	e.byte1(codecV2)
	e.byte1(uint8(CmdRegisterWorker))
	e.varint(77)
	e.str("w1")
	e.uvarint(4)
	v2 := seal(e.b)
	plain, err := Encode(77, &RegisterWorker{WorkerID: "w1", Capacity: 4})
	if err != nil || !bytes.Equal(plain, v2) {
		t.Fatalf("a registration without a version is not written as version 2 wrote it: %x, want %x (%v)", plain, v2, err)
	}
	for name, data := range map[string][]byte{"v1": encodeV1(t, 77, &RegisterWorker{WorkerID: "w1", Capacity: 4}), "v2": v2} {
		env, err := Decode(data)
		if err != nil || !reflect.DeepEqual(env.Command, &RegisterWorker{WorkerID: "w1", Capacity: 4}) {
			t.Fatalf("%s registration: %+v %v", name, env.Command, err)
		}
	}

	with := &RegisterWorker{WorkerID: "w1", Capacity: 4, Version: "v2.0.0"}
	v3, err := Encode(77, with)
	if err != nil || v3[0] != codecV3 {
		t.Fatalf("a registration with a version: %x %v, want codec version 3", v3, err)
	}
	if env, err := Decode(v3); err != nil || !reflect.DeepEqual(env.Command, with) {
		t.Fatalf("version 3 registration: %+v %v", env.Command, err)
	}
	if err := VerifyChecksum(append(bytes.Clone(v3[:len(v3)-1]), v3[len(v3)-1]^1)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a version 3 entry's checksum is not checked: %v", err)
	}
	// A deregistration as lost is version 3; a plain one is version 2's.
	if lost, err := Encode(77, &DeregisterWorker{WorkerID: "w1", Lost: true}); err != nil || lost[0] != codecV3 {
		t.Fatalf("a deregistration as lost: %x %v, want codec version 3", lost, err)
	}
	if plain, err := Encode(77, &DeregisterWorker{WorkerID: "w1"}); err != nil || plain[0] != codecV2 {
		t.Fatalf("a plain deregistration: %x %v, want codec version 2", plain, err)
	}
	// The same body labelled version 2 has a field version 2 does not
	// know: trailing bytes.
	relabelled := seal(append([]byte{codecV2}, v3[1:len(v3)-checksumLen]...))
	if _, err := Decode(relabelled); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a version 3 body read as version 2: %v", err)
	}
	// A version that is not printable ASCII, or too long, is refused.
	for _, bad := range []string{"v 1", strings.Repeat("v", MaxVersionLen+1)} {
		if _, err := Encode(77, &RegisterWorker{WorkerID: "w1", Capacity: 4, Version: bad}); !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("version %q: %v", bad, err)
		}
		e := encoder{codec: codecV3}
		e.byte1(codecV3)
		e.byte1(uint8(CmdRegisterWorker))
		e.varint(77)
		(&RegisterWorker{WorkerID: "w1", Capacity: 4, Version: bad}).encode(&e)
		if _, err := Decode(seal(e.b)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("an entry with version %q: %v", bad, err)
		}
	}
}

// Version 4 carries a node's level and a release as lost; without them the
// same commands are written as version 2 wrote them, so a node of an
// older build applies every entry it can until the leader knows every
// voter is at level 4.
func TestCodecVersion4OnlyWhenNeeded(t *testing.T) {
	for _, c := range []struct {
		cmd  Command
		want byte
	}{
		{&SetNode{NodeID: "a", RaftAddr: "h:1", APIAddr: "h:2"}, codecV2},
		{&SetNode{NodeID: "a", RaftAddr: "h:1", APIAddr: "h:2", Level: 4, Version: "v1"}, codecV4},
		{&Release{WorkerID: "w", JobID: "j", Token: 1}, codecV2},
		{&Release{WorkerID: "w", JobID: "j", Token: 1, Lost: true}, codecV4},
	} {
		data, err := Encode(7, c.cmd)
		if err != nil || data[0] != c.want || CodecOf(c.cmd) != c.want {
			t.Fatalf("%+v: codec %d (CodecOf %d), want %d (%v)", c.cmd, data[0], CodecOf(c.cmd), c.want, err)
		}
		if env, err := Decode(data); err != nil || !reflect.DeepEqual(env.Command, c.cmd) {
			t.Fatalf("%+v: decoded %+v %v", c.cmd, env.Command, err)
		}
	}
	if Level < codecV4 {
		t.Fatalf("this build's level %d does not cover the codec it writes", Level)
	}
	// A version without a level, or a level below 2, is refused.
	for _, bad := range []*SetNode{{NodeID: "a", RaftAddr: "h:1", APIAddr: "h:2", Version: "v1"}, {NodeID: "a", RaftAddr: "h:1", APIAddr: "h:2", Level: 1}} {
		if _, err := Encode(7, bad); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
}

// encodeV1 encodes a command as version 1 did: no checksum. Logs written
// before version 2 hold entries like these.
func encodeV1(t testing.TB, time int64, c Command) []byte {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	e := encoder{}
	e.byte1(codecV1)
	e.byte1(uint8(c.Type()))
	e.varint(time)
	c.encode(&e)
	return e.b
}

// seal gives a version 2 body its checksum.
func seal(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli))
}

// Every bit of a version 2 or 3 entry is covered: any one flipped,
// anywhere, and the entry is refused as corrupt, never decoded into another
// command.
func TestChecksumRefusesEveryFlippedBit(t *testing.T) {
	for _, c := range sampleCommands() {
		data, err := Encode(7, c)
		if err != nil {
			t.Fatal(err)
		}
		if data[0] != codecOf(c) {
			t.Fatalf("%T encoded as version %d", c, data[0])
		}
		if err := VerifyChecksum(data); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		for i := range data {
			for bit := range 8 {
				bad := bytes.Clone(data)
				bad[i] ^= 1 << bit
				if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%T: bit %d of byte %d flipped: %v", c, bit, i, err)
				}
				// The version byte aside, the checksum alone catches it.
				if i > 0 && VerifyChecksum(bad) == nil {
					t.Fatalf("%T: bit %d of byte %d flipped passed the checksum", c, bit, i)
				}
			}
		}
	}
}

// Entries written before the checksum (version 1) still decode, to the
// same commands.
func TestVersion1EntriesStillDecode(t *testing.T) {
	for _, c := range sampleCommands() {
		if codecOf(c) > codecV2 {
			continue // a field version 1 had no room for
		}
		old := encodeV1(t, -42, c)
		if err := VerifyChecksum(old); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		env, err := Decode(old)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if env.Time != -42 || !reflect.DeepEqual(env.Command, c) {
			t.Fatalf("%T: decoded %+v at %d", c, env.Command, env.Time)
		}
		// A version 1 entry with a checksum's worth of bytes after it is
		// not mistaken for anything: trailing bytes are corrupt.
		if _, err := Decode(append(old, 1, 2, 3, 4)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%T: %v", c, err)
		}
	}
	// A log mixing both applies in order.
	f := New()
	for i, data := range [][]byte{
		encodeV1(t, 1, &RegisterWorker{WorkerID: "w", Capacity: 1}),
		mustEncode(t, &SubmitJob{Spec: spec("j")}),
		encodeV1(t, 3, &Acquire{WorkerID: "w", RequestID: "r", Queues: []string{"default"}, Max: 1}),
	} {
		if _, err := f.Apply(uint64(i+1), data); err != nil {
			t.Fatalf("entry %d: %v", i+1, err)
		}
	}
	if l := f.WorkerLeases("w"); len(l) != 1 || l[0].JobID != "j" {
		t.Fatalf("leases after a mixed log: %+v", l)
	}
}

// Validation names the field and refuses before anything is encoded.
func TestValidation(t *testing.T) {
	s := spec("j")
	tmpl := s
	tmpl.ID = ""
	bad := func(mod func(*JobSpec)) *SubmitJob {
		c := &SubmitJob{Spec: s}
		mod(&c.Spec)
		return c
	}
	for _, tc := range []struct {
		cmd   Command
		field string
		want  error
	}{
		{&RegisterWorker{WorkerID: "", Capacity: 1}, "worker_id", ErrInvalidArgument},
		{&RegisterWorker{WorkerID: "w", Capacity: 0}, "capacity", ErrInvalidArgument},
		{&RegisterWorker{WorkerID: "has space", Capacity: 1}, "worker_id", ErrInvalidArgument},
		{bad(func(s *JobSpec) { s.ID = strings.Repeat("a", MaxIDLen+1) }), "spec.id", ErrTooLarge},
		{bad(func(s *JobSpec) { s.Queue = "no/slash" }), "spec.queue", ErrInvalidArgument},
		{bad(func(s *JobSpec) { s.Payload = make([]byte, MaxPayloadLen+1) }), "spec.payload", ErrTooLarge},
		{bad(func(s *JobSpec) { s.MaxAttempts = 0 }), "spec.max_attempts", ErrInvalidArgument},
		{bad(func(s *JobSpec) { s.OnWorkerLost = 9 }), "spec.on_worker_lost", ErrInvalidArgument},
		{bad(func(s *JobSpec) { s.MaxWorkerLosses = MaxAttempts + 1 }), "spec.max_worker_losses", ErrInvalidArgument},
		{&Acquire{WorkerID: "w", RequestID: "r", Max: 1}, "queues", ErrInvalidArgument},
		{&Acquire{WorkerID: "w", RequestID: "r", Queues: []string{"a", "a"}, Max: 1}, "queues", ErrInvalidArgument},
		{&Acquire{WorkerID: "w", RequestID: "r", Queues: []string{"a"}, Max: MaxAcquireBatch + 1}, "max", ErrTooLarge},
		{&Acquire{WorkerID: "w", RequestID: "", Queues: []string{"a"}, Max: 1}, "request_id", ErrInvalidArgument},
		{&Report{WorkerID: "w", JobID: "j", Token: 1, ReportID: "r", Outcome: 0}, "outcome", ErrInvalidArgument},
		{&Report{WorkerID: "w", JobID: "j", Token: 1, ReportID: "r", Outcome: OutcomeSucceeded, Retryable: true}, "retryable", ErrInvalidArgument},
		{&Report{WorkerID: "w", JobID: "j", Token: 1, ReportID: "r", Outcome: OutcomeSucceeded, Ref: "a\x00b"}, "ref", ErrInvalidArgument},
		{&Report{WorkerID: "w", JobID: "j", Token: 1, ReportID: "r", Outcome: OutcomeSucceeded, Message: "\xff"}, "message", ErrInvalidArgument},
		{&Expire{}, "leases", ErrInvalidArgument},
		{&Expire{Leases: make([]LeaseRef, MaxExpireBatch+1)}, "leases", ErrTooLarge},
		{&TimeOut{}, "leases", ErrInvalidArgument},
		{&TimeOut{Leases: make([]LeaseRef, MaxTimeOutBatch+1)}, "leases", ErrTooLarge},
		{&TimeOut{Leases: []LeaseRef{{"j", 0}}}, "leases.token", ErrInvalidArgument},
		{&SubmitJob{Spec: spec("j"), TimeoutMs: MinTimeout - 1}, "spec.timeout", ErrInvalidArgument},
		{&SubmitJob{Spec: spec("j"), TimeoutMs: MaxTimeout + 1}, "spec.timeout", ErrInvalidArgument},
		{&Report{WorkerID: "w", JobID: "j", Token: 1, ReportID: "r", Outcome: OutcomeTimedOut}, "outcome", ErrInvalidArgument},
		{&CancelSubmitter{Submitter: "s", Limit: 0}, "limit", ErrInvalidArgument},
		{&Compact{Limit: MaxCompactBatch + 1}, "limit", ErrInvalidArgument},
		{&RecordEvent{Event: EventJobSubmitted}, "event", ErrInvalidArgument},
		{&SetNode{NodeID: "n", RaftAddr: "nohost", APIAddr: "h:1"}, "raft_addr", ErrInvalidArgument},
		{&SetNode{NodeID: "n", RaftAddr: "h:1", APIAddr: "h:port"}, "api_addr", ErrInvalidArgument},
		{&SetNode{NodeID: "n", RaftAddr: "h:1", APIAddr: "h:1" + strings.Repeat("0", MaxAddrLen)}, "api_addr", ErrTooLarge},
		{&PutSchedule{Name: "a b", PauseOnly: true}, "name", ErrInvalidArgument},
		{&PutSchedule{Name: "s", Missed: MissedSkip, Template: tmpl}, "cron", ErrInvalidArgument},
		{&PutSchedule{Name: "s", Cron: strings.Repeat("*", MaxCronLen+1), Missed: MissedSkip, Template: tmpl}, "cron", ErrTooLarge},
		{&PutSchedule{Name: "s", Cron: "* * * * *", Zone: "Europe/ Paris", Missed: MissedSkip, Template: tmpl}, "zone", ErrInvalidArgument},
		{&PutSchedule{Name: "s", Cron: "* * * * *", Missed: 9, Template: tmpl}, "missed", ErrInvalidArgument},
		{&PutSchedule{Name: "s", Cron: "* * * * *", Missed: MissedSkip, Template: s}, "spec.id", ErrInvalidArgument},
		{&PutSchedule{Name: "s", Cron: "* * * * *", Missed: MissedSkip, Template: JobSpec{Queue: "q", Kind: "k"}}, "spec.max_attempts", ErrInvalidArgument},
		{&DeleteSchedule{}, "name", ErrInvalidArgument},
		{&FireSchedule{Name: "s"}, "slot", ErrInvalidArgument},
		{&RetryJob{JobID: ""}, "job_id", ErrInvalidArgument},
		{&RetryJob{JobID: "j", Reason: "\xff"}, "reason", ErrInvalidArgument},
		{&PurgeJobs{Limit: 0}, "limit", ErrInvalidArgument},
		{&PurgeJobs{Limit: MaxPurgeBatch + 1}, "limit", ErrInvalidArgument},
		{&PurgeJobs{JobIDs: make([]string, MaxPurgeBatch+1), Limit: 1}, "ids", ErrTooLarge},
		{&PurgeJobs{JobIDs: []string{"bad id"}, Limit: 1}, "ids", ErrInvalidArgument},
		{&PurgeJobs{JobIDs: []string{"j"}, Queue: "q", Limit: 1}, "ids", ErrInvalidArgument},
		{&PurgeJobs{JobIDs: []string{"j"}, OlderThan: 1, Limit: 1}, "ids", ErrInvalidArgument},
		{&PurgeJobs{Queue: "no/slash", Limit: 1}, "queue", ErrInvalidArgument},
		{&PurgeJobs{OlderThan: -1, Limit: 1}, "older_than", ErrInvalidArgument},
		{&PurgeJobs{OlderThan: MaxPurgeAge + 1, Limit: 1}, "older_than", ErrInvalidArgument},
	} {
		_, err := Encode(1, tc.cmd)
		var fe *FieldError
		if !errors.Is(err, tc.want) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%T %+v: got %v, want %v on field %s", tc.cmd, tc.cmd, err, tc.want, tc.field)
		}
	}
}

func TestEnumNamesRoundTrip(t *testing.T) {
	for s := range jobStateNames {
		if got, ok := ParseJobState(s.String()); !ok || got != s {
			t.Errorf("job state %d", s)
		}
	}
	for o := range outcomeNames {
		if got, ok := ParseOutcome(o.String()); !ok || got != o {
			t.Errorf("outcome %d", o)
		}
	}
	for e := range eventTypeNames {
		if got, ok := ParseEventType(e.String()); !ok || got != e {
			t.Errorf("event type %d", e)
		}
	}
	for p := range missedPolicyNames {
		if got, ok := ParseMissedPolicy(p.String()); !ok || got != p {
			t.Errorf("missed policy %d", p)
		}
	}
	if _, ok := ParseJobState("nonsense"); ok {
		t.Error("parsed nonsense")
	}
	if JobState(99).String() != "unknown" {
		t.Error("unknown state name")
	}
}

// An entry about to be applied names workers, jobs and queues the state
// already holds. Decoded for that state, it reads to the same command as
// without it, and each name the state holds is the state's own string:
// a report's worker and job ids cost no allocation.
func TestDecodeForSharesTheStatesNames(t *testing.T) {
	d := newBenchDriver()
	d.must(t, &RegisterWorker{WorkerID: "w1", Capacity: 4})
	s := spec("job-1")
	s.Queue, s.Kind, s.Submitter = "a", "run", "exec"
	d.must(t, &SubmitJob{Spec: s})
	d.must(t, &Acquire{WorkerID: "w1", RequestID: "r1", Queues: []string{"a"}, Max: 1, Start: true})
	st := d.f.st
	job := st.jobByID("job-1")

	for _, c := range sampleCommands() {
		data, err := Encode(7, c)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		plain, err := Decode(data)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		held, err := decodeFor(data, st)
		if err != nil || !reflect.DeepEqual(held, plain) {
			t.Fatalf("%T: decoded for the state %+v (%v), without %+v", c, held.Command, err, plain.Command)
		}
	}

	same := func(what, got, want string) {
		t.Helper()
		if got != want || unsafe.StringData(got) != unsafe.StringData(want) {
			t.Errorf("%s %q is not the state's copy", what, got)
		}
	}
	report, err := Encode(7, &Report{WorkerID: "w1", JobID: "job-1", Token: 1, ReportID: "rep", Outcome: OutcomeSucceeded})
	if err != nil {
		t.Fatal(err)
	}
	env, err := decodeFor(report, st)
	if err != nil {
		t.Fatal(err)
	}
	rep := env.Command.(*Report)
	same("worker id", rep.WorkerID, st.workers["w1"].ID)
	same("job id", rep.JobID, job.ID)
	acquire, err := Encode(7, &Acquire{WorkerID: "w1", RequestID: "r2", Queues: []string{"a"}, Kinds: []string{"run"}, Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	if env, err = decodeFor(acquire, st); err != nil {
		t.Fatal(err)
	}
	acq := env.Command.(*Acquire)
	same("worker id", acq.WorkerID, st.workers["w1"].ID)
	same("queue", acq.Queues[0], job.Queue)
	same("kind", acq.Kinds[0], job.Kind)

	// What the state does not hold is read as before: a copy.
	other, err := Encode(7, &Report{WorkerID: "w9", JobID: "job-9", Token: 1, ReportID: "rep", Outcome: OutcomeSucceeded})
	if err != nil {
		t.Fatal(err)
	}
	if env, err = decodeFor(other, st); err != nil || env.Command.(*Report).WorkerID != "w9" || env.Command.(*Report).JobID != "job-9" {
		t.Fatalf("unknown names decoded as %+v (%v)", env.Command, err)
	}

	// A job id longer than a conversion keeps on the stack (32 bytes) too.
	long := spec("job-whose-id-is-longer-than-thirty-two-bytes")
	d.must(t, &SubmitJob{Spec: long})
	longReport, err := Encode(7, &Report{WorkerID: "w1", JobID: long.ID, Token: 1, ReportID: "rep", Outcome: OutcomeSucceeded})
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{report, longReport} {
		without := testing.AllocsPerRun(100, func() { _, _ = decodeFor(data, nil) })
		if with := testing.AllocsPerRun(100, func() { _, _ = decodeFor(data, st) }); with != without-2 {
			t.Errorf("a report decoded for the state allocates %v times, %v without it: want two fewer (no worker id, no job id)", with, without)
		}
	}
}
