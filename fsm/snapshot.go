package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strings"
)

// Snapshot stream format, version 6:
//
//	magic "LEASEHOLD-SNAPSHOT" and the version byte (\x01 to \x06)
//	record*    each: tag byte, uvarint body length, body
//	end        tag 0xFF, then the CRC-32C of every byte before it, 4 bytes LE
//
// Records come in a fixed order: one header, the workers by id, the jobs by
// seq, the events by seq, the nodes by id, the queue settings by queue name, the schedules by
// name. The encoding is canonical, so two replicas with
// the same state write the same bytes, and Hash is a hash of them.
//
// Versions: 2 adds the audit fields (actor, source) at the end of each
// event; 3 adds the worker's version at the end of each worker; 4 adds the
// node's level and version at the end of each node; 5 adds the job's
// NotBefore and retry policy at the end of each job; 6 adds the job's
// timeout (milliseconds) at the end of each job, the queue settings
// records and the schedule records (written only in 6: a state with
// neither is still written in the version the nodes read), and may hold
// the dead state (JobDead, as a job's state or a report's answer) and the
// events of level 6 (31 to 42), which a reader of 5 refuses. Every version ever
// written stays readable. The writer writes the lowest level recorded for
// the nodes (the leader records levels only when every voter is at level 4
// or more), capped at its own, and version 3 while none is recorded, so a
// node of an older build can still install the snapshots of a mixed
// cluster: nothing a newer version adds exists before every voter reads it.
const (
	snapMagic     = "LEASEHOLD-SNAPSHOT"
	snapVersion   = 6
	tagHeader     = 1
	tagWorker     = 2
	tagJob        = 3
	tagEvent      = 4
	tagNode       = 5
	tagQueue      = 6
	tagSchedule   = 7
	tagEnd        = 0xFF
	maxRecordSize = MaxPayloadLen + 1<<20 // a job with its payload and lease history
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot is a point-in-time view of the state. Taking it is cheap (it
// copies shard pointers, not jobs); WriteTo streams it and may run
// concurrently with Apply. Release it when done: until then every job it
// froze is copied before its next change.
type Snapshot struct {
	f        *FSM
	st       *state // the state it froze (a restore may have replaced it since)
	gen      uint64 // the generation it froze
	released bool   // under f.mu

	hdr     snapHeader
	shards  []*jobShard
	workers []Worker // copies: the snapshot is written while the state moves on
	nodes   []*Node  // never mutated: a change replaces the pointer
	queues  []QueueSettings
	// schedules likewise; a snapshot holding one is version 6
	schedules []*Schedule
	// minVersion is the lowest version that holds every record: 5 once a
	// job has a NotBefore or a retry policy or an event of jobs that wait
	// is kept, 6 once a job is dead or has a timeout, a queue has settings,
	// a schedule exists or an event of level 6 is kept (a queue paused and
	// resumed, a schedule created and deleted leave only their events),
	// whatever the nodes' levels say.
	minVersion byte
	events     eventLog
}

type snapHeader struct {
	lastIndex, lastTime, lastToken uint64
	jobSeq, finishSeq, eventSeq    uint64
	workers, jobs, events, nodes   uint64
}

// Snapshot freezes the current state. It holds the write lock only while it
// copies the shard pointers, the worker pointers and the event chunk
// headers: its cost grows with jobs/1024 + workers, not with jobs. It takes
// the lock itself, so Hash may call it from any goroutine.
func (f *FSM) Snapshot() *Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.st
	s.gen++ // every shard and job now belongs to the snapshot until copied
	s.frozen = append(s.frozen, s.gen-1)
	snap := &Snapshot{
		f: f, st: s, gen: s.gen - 1,
		hdr: snapHeader{
			lastIndex: s.lastIndex, lastTime: uint64(s.lastTime), lastToken: s.lastToken,
			jobSeq: s.jobSeq, finishSeq: s.finishSeq, eventSeq: s.eventSeq,
			workers: uint64(len(s.workers)), jobs: uint64(s.jobIDs.len()), events: uint64(s.events.len()),
			nodes: uint64(len(s.nodes)),
		},
		shards:     slices.Clone(s.shards),
		minVersion: 3,
		events:     s.events.view(),
	}
	if s.timed > 0 || s.eventVersions[5] > 0 {
		snap.minVersion = 5
	}
	if s.counts[JobDead] > 0 || len(s.queueSettings) > 0 || s.withTimeout > 0 || s.eventVersions[6] > 0 {
		snap.minVersion = 6
	}
	for _, qs := range s.queueSettings {
		snap.queues = append(snap.queues, qs)
	}
	for _, sc := range s.schedules {
		snap.schedules = append(snap.schedules, sc)
		snap.minVersion = 6
	}
	snap.workers = make([]Worker, 0, len(s.workers))
	for _, w := range s.workers {
		snap.workers = append(snap.workers, w)
	}
	for _, n := range s.nodes {
		snap.nodes = append(snap.nodes, n)
	}
	return snap
}

// Release says the snapshot will not be read again: the versions only it
// read may then be changed in place. Releasing twice is harmless; a
// snapshot never released only costs copies.
func (snap *Snapshot) Release() {
	snap.f.mu.Lock()
	defer snap.f.mu.Unlock()
	if snap.released {
		return
	}
	snap.released = true
	st := snap.st
	if i := slices.Index(st.frozen, snap.gen); i >= 0 {
		st.frozen = slices.Delete(st.frozen, i, i+1)
	}
}

// LastIndex is the raft index the snapshot was taken at.
func (s *Snapshot) LastIndex() uint64 { return s.hdr.lastIndex }

// snapWriter frames records and keeps the running checksum.
type snapWriter struct {
	version byte
	w       *bufio.Writer
	crc     hash.Hash32
	n       int64
	enc     encoder
	err     error
	// frame is a field, not a local: a local escapes through the hash
	// interface and costs an allocation per record.
	frame [1 + binary.MaxVarintLen64]byte
}

func (sw *snapWriter) write(p []byte) {
	if sw.err != nil {
		return
	}
	n, err := sw.w.Write(p)
	sw.n += int64(n)
	sw.crc.Write(p[:n])
	sw.err = err
}

func (sw *snapWriter) record(tag byte, body func(e *encoder)) {
	sw.enc.b = sw.enc.b[:0]
	body(&sw.enc)
	sw.frame[0] = tag
	n := binary.PutUvarint(sw.frame[1:], uint64(len(sw.enc.b)))
	sw.write(sw.frame[:1+n])
	sw.write(sw.enc.b)
}

func (sw *snapWriter) finish() error {
	sw.write([]byte{tagEnd})
	sw.write(binary.LittleEndian.AppendUint32(nil, sw.crc.Sum32()))
	if sw.err == nil {
		sw.err = sw.w.Flush()
	}
	return sw.err
}

// SnapshotVersion reads the version of the snapshot at the start of r (an
// io.ReaderAt, so the caller's offset does not move).
func SnapshotVersion(r io.ReaderAt) (byte, error) {
	head := make([]byte, len(snapMagic)+1)
	if _, err := r.ReadAt(head, 0); err != nil {
		return 0, fmt.Errorf("%w: snapshot header: %w", ErrCorrupt, err)
	}
	if string(head[:len(snapMagic)]) != snapMagic {
		return 0, fmt.Errorf("%w: not a snapshot", ErrCorrupt)
	}
	return head[len(snapMagic)], nil
}

// snapVersionFor is the version a snapshot of these nodes is written in:
// the lowest level recorded for them (at most snapVersion), 3 while none
// is recorded.
func snapVersionFor(nodes []*Node) byte {
	v := byte(0)
	for _, n := range nodes {
		v = lowerLevel(v, n.Level)
	}
	if v == 0 {
		return 3
	}
	return min(max(v, 4), snapVersion)
}

func newSnapWriter(w io.Writer, version byte) *snapWriter {
	sw := &snapWriter{version: version, w: bufio.NewWriterSize(w, 256<<10), crc: crc32.New(castagnoli)}
	sw.write(append([]byte(snapMagic), version))
	return sw
}

// WriteTo streams the snapshot. It never touches the live state.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	sw := newSnapWriter(w, max(snapVersionFor(s.nodes), s.minVersion))
	sw.record(tagHeader, func(e *encoder) { encodeHeader(e, &s.hdr) })
	slices.SortFunc(s.workers, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	for i := range s.workers {
		sw.record(tagWorker, func(e *encoder) { encodeWorker(e, &s.workers[i], sw.version) })
	}
	eachJob(s.shards, func(j *Job) bool {
		sw.record(tagJob, func(e *encoder) { encodeJob(e, j, sw.version) })
		return sw.err == nil
	})
	for i := range s.events.len() {
		sw.record(tagEvent, func(e *encoder) { encodeEvent(e, s.events.at(i), sw.version) })
	}
	slices.SortFunc(s.nodes, func(a, b *Node) int { return strings.Compare(a.ID, b.ID) })
	for _, n := range s.nodes {
		sw.record(tagNode, func(e *encoder) { encodeNode(e, n, sw.version) })
	}
	slices.SortFunc(s.queues, func(a, b QueueSettings) int { return strings.Compare(a.Queue, b.Queue) })
	for i := range s.queues {
		sw.record(tagQueue, func(e *encoder) { encodeQueueSettings(e, &s.queues[i]) })
	}
	slices.SortFunc(s.schedules, func(a, b *Schedule) int { return strings.Compare(a.Name, b.Name) })
	for _, sc := range s.schedules {
		sw.record(tagSchedule, func(e *encoder) { encodeSchedule(e, sc) })
	}
	err := sw.finish()
	return sw.n, err
}

// Hash returns a SHA-256 of the state's canonical encoding. Replicas that
// applied the same log (or restored the same snapshot) have the same hash.
func (f *FSM) Hash() [32]byte {
	h, _ := f.HashAt()
	return h
}

// HashAt is Hash with the index of the state it hashed: one frozen
// snapshot gives both, whatever is applied meanwhile.
func (f *FSM) HashAt() ([32]byte, uint64) {
	snap := f.Snapshot()
	defer snap.Release()
	h := sha256.New()
	if _, err := snap.WriteTo(h); err != nil {
		panic(err) // writing to a hash cannot fail
	}
	var out [32]byte
	h.Sum(out[:0])
	return out, snap.LastIndex()
}

// snapReader reads framed records and checks the checksum at the end.
type snapReader struct {
	version byte
	r       *bufio.Reader
	crc     hash.Hash32
	buf     []byte
}

func newSnapReader(r io.Reader) (*snapReader, error) {
	sr := &snapReader{r: bufio.NewReaderSize(r, 256<<10), crc: crc32.New(castagnoli)}
	magic := make([]byte, len(snapMagic)+1)
	if _, err := io.ReadFull(sr.r, magic); err != nil {
		return nil, fmt.Errorf("%w: snapshot magic: %w", ErrCorrupt, err)
	}
	if string(magic[:len(snapMagic)]) != snapMagic {
		return nil, fmt.Errorf("%w: not a leasehold snapshot", ErrCorrupt)
	}
	sr.version = magic[len(snapMagic)]
	if sr.version < 1 || sr.version > snapVersion {
		return nil, fmt.Errorf("%w: snapshot version %d (this build reads 1 to %d)", ErrCorrupt, sr.version, snapVersion)
	}
	sr.crc.Write(magic)
	return sr, nil
}

// next returns the next record's tag and body (valid until the next call).
// At the end it checks the checksum and returns tagEnd.
func (sr *snapReader) next() (byte, []byte, error) {
	tag, err := sr.r.ReadByte()
	if err != nil {
		return 0, nil, fmt.Errorf("%w: snapshot truncated: %w", ErrCorrupt, err)
	}
	sr.crc.Write([]byte{tag})
	if tag == tagEnd {
		want := sr.crc.Sum32()
		var sum [4]byte
		if _, err := io.ReadFull(sr.r, sum[:]); err != nil {
			return 0, nil, fmt.Errorf("%w: snapshot checksum: %w", ErrCorrupt, err)
		}
		if got := binary.LittleEndian.Uint32(sum[:]); got != want {
			return 0, nil, fmt.Errorf("%w: snapshot checksum %08x, computed %08x", ErrCorrupt, got, want)
		}
		if _, err := sr.r.ReadByte(); err != io.EOF {
			return 0, nil, fmt.Errorf("%w: bytes after the snapshot's end", ErrCorrupt)
		}
		return tagEnd, nil, nil
	}
	n, err := binary.ReadUvarint(byteCounter{sr})
	if err != nil {
		return 0, nil, fmt.Errorf("%w: record length: %w", ErrCorrupt, err)
	}
	if n > maxRecordSize {
		return 0, nil, fmt.Errorf("%w: record of %d bytes", ErrCorrupt, n)
	}
	if cap(sr.buf) < int(n) {
		sr.buf = make([]byte, n)
	}
	sr.buf = sr.buf[:n]
	if _, err := io.ReadFull(sr.r, sr.buf); err != nil {
		return 0, nil, fmt.Errorf("%w: record body: %w", ErrCorrupt, err)
	}
	sr.crc.Write(sr.buf)
	return tag, sr.buf, nil
}

// byteCounter feeds ReadUvarint and the checksum together.
type byteCounter struct{ sr *snapReader }

func (b byteCounter) ReadByte() (byte, error) {
	c, err := b.sr.r.ReadByte()
	if err == nil {
		b.sr.crc.Write([]byte{c})
	}
	return c, err
}

// Restore replaces the state with a snapshot. The snapshot is decoded into a
// fresh state, its indexes rebuilt and its invariants checked; only then is
// it swapped in. On any error the current state is untouched.
func (f *FSM) Restore(r io.Reader) error {
	s, err := readState(r)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = s
	close(f.changed)
	f.changed = make(chan struct{})
	return nil
}

func readState(r io.Reader) (*state, error) {
	sr, err := newSnapReader(r)
	if err != nil {
		return nil, err
	}
	tag, body, err := sr.next()
	if err != nil {
		return nil, err
	}
	if tag != tagHeader {
		return nil, fmt.Errorf("%w: snapshot starts with record %d, not a header", ErrCorrupt, tag)
	}
	var hdr snapHeader
	if err := decodeRecord(body, func(d *decoder) { decodeHeader(d, &hdr) }); err != nil {
		return nil, err
	}
	if err := checkHeader(&hdr); err != nil {
		return nil, err
	}
	s := newState()
	s.lastIndex, s.lastTime, s.lastToken = hdr.lastIndex, int64(hdr.lastTime), hdr.lastToken
	s.jobSeq, s.finishSeq, s.eventSeq = hdr.jobSeq, hdr.finishSeq, hdr.eventSeq
	var workers, jobs, lastSeq uint64
	var lastQueue string
	var kept keptStrings // the jobs' repeated strings (decoder.keptStr)
	order := byte(tagWorker)
	for {
		tag, body, err := sr.next()
		if err != nil {
			return nil, err
		}
		if tag == tagEnd {
			break
		}
		if tag < order || tag > tagSchedule || tag >= tagQueue && sr.version < 6 {
			return nil, fmt.Errorf("%w: record %d out of order", ErrCorrupt, tag)
		}
		order = tag
		switch tag {
		case tagWorker:
			var w Worker
			if err := decodeRecord(body, func(d *decoder) { decodeWorker(d, &w, sr.version) }); err != nil {
				return nil, err
			}
			if _, ok := s.workers[w.ID]; ok {
				return nil, fmt.Errorf("%w: worker %s twice", ErrCorrupt, w.ID)
			}
			s.workers[w.ID] = w
			if workers++; workers > MaxWorkers {
				return nil, fmt.Errorf("%w: more than %d workers", ErrCorrupt, MaxWorkers)
			}
		case tagJob:
			j := new(Job)
			d := decoder{b: body, kept: &kept}
			decodeJob(&d, j, sr.version)
			if err := d.done(); err != nil {
				return nil, err
			}
			if j.Seq <= lastSeq || j.Seq > s.jobSeq {
				return nil, fmt.Errorf("%w: job seq %d out of order", ErrCorrupt, j.Seq)
			}
			lastSeq = j.Seq
			sh := s.mutableShard(j.Seq, true)
			sh.jobs[j.Seq&shardMask] = j
			sh.claim(j.Seq & shardMask)
			sh.n++
			if jobs++; jobs > MaxJobs {
				return nil, fmt.Errorf("%w: more than %d jobs", ErrCorrupt, MaxJobs)
			}
		case tagEvent:
			var ev Event
			if err := decodeRecord(body, func(d *decoder) { decodeEvent(d, &ev, sr.version) }); err != nil {
				return nil, err
			}
			if s.events.len() == MaxEvents {
				return nil, fmt.Errorf("%w: more than %d events", ErrCorrupt, MaxEvents)
			}
			s.events.push(ev)
		case tagNode:
			n := new(Node)
			if err := decodeRecord(body, func(d *decoder) { decodeNode(d, n, sr.version) }); err != nil {
				return nil, err
			}
			if s.nodes[n.ID] != nil || len(s.nodes) >= MaxNodes {
				return nil, fmt.Errorf("%w: node %s twice or too many nodes", ErrCorrupt, n.ID)
			}
			s.nodes[n.ID] = n
		case tagQueue:
			var qs QueueSettings
			if err := decodeRecord(body, func(d *decoder) { decodeQueueSettings(d, &qs) }); err != nil {
				return nil, err
			}
			if len(s.queueSettings) >= MaxQueueSettings || qs.Queue <= lastQueue {
				return nil, fmt.Errorf("%w: queue %q out of order, or more than %d queues with settings", ErrCorrupt, qs.Queue, MaxQueueSettings)
			}
			lastQueue = qs.Queue
			s.queueSettings[qs.Queue] = qs
		case tagSchedule:
			sc := new(Schedule)
			if err := decodeRecord(body, func(d *decoder) { decodeSchedule(d, sc) }); err != nil {
				return nil, err
			}
			if s.schedules[sc.Name] != nil || len(s.schedules) >= MaxSchedules {
				return nil, fmt.Errorf("%w: schedule %s twice or too many schedules", ErrCorrupt, sc.Name)
			}
			s.schedules[sc.Name] = sc
		}
	}
	if workers != hdr.workers || jobs != hdr.jobs || uint64(s.events.len()) != hdr.events ||
		uint64(len(s.nodes)) != hdr.nodes {
		return nil, fmt.Errorf("%w: snapshot counts differ from its header", ErrCorrupt)
	}
	s.rebuildIndexes()
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%w: restored state: %w", ErrCorrupt, err)
	}
	return s, nil
}

// checkHeader refuses, before any record is read, counters no cluster
// reaches (an index or sequence at MaxIndex would wrap, or leave Raft
// nowhere to go) and counts beyond the state's bounds. Whether the records
// agree with the header is checked once they are read.
func checkHeader(h *snapHeader) error {
	for _, c := range []struct {
		name string
		v    uint64
	}{{"index", h.lastIndex}, {"job seq", h.jobSeq}, {"finish seq", h.finishSeq}, {"event seq", h.eventSeq}} {
		if c.v >= MaxIndex {
			return fmt.Errorf("%w: snapshot %s %d is beyond any cluster's (%d)", ErrCorrupt, c.name, c.v, uint64(MaxIndex))
		}
	}
	if h.lastTime > math.MaxInt64 {
		return fmt.Errorf("%w: snapshot time %d is out of range", ErrCorrupt, h.lastTime)
	}
	if h.workers > MaxWorkers || h.jobs > MaxJobs || h.events > MaxEvents || h.nodes > MaxNodes {
		return fmt.Errorf("%w: snapshot counts (%d workers, %d jobs, %d events, %d nodes) beyond the state's bounds",
			ErrCorrupt, h.workers, h.jobs, h.events, h.nodes)
	}
	return nil
}

func decodeRecord(body []byte, fn func(d *decoder)) error {
	d := decoder{b: body}
	fn(&d)
	return d.done()
}

// InspectSnapshot reads a snapshot fully, checks it, and returns its
// counters, without touching any live state.
func InspectSnapshot(r io.Reader) (Stats, error) {
	s, err := readState(r)
	if err != nil {
		return Stats{}, err
	}
	f := &FSM{st: s}
	return f.Stats(), nil
}

// --- record bodies ---

func encodeHeader(e *encoder, h *snapHeader) {
	for _, v := range []uint64{h.lastIndex, h.lastTime, h.lastToken, h.jobSeq, h.finishSeq, h.eventSeq, h.workers, h.jobs, h.events, h.nodes} {
		e.uvarint(v)
	}
}

func decodeHeader(d *decoder, h *snapHeader) {
	for _, p := range []*uint64{&h.lastIndex, &h.lastTime, &h.lastToken, &h.jobSeq, &h.finishSeq, &h.eventSeq, &h.workers, &h.jobs, &h.events, &h.nodes} {
		*p = d.uvarint()
	}
}

func encodeWorker(e *encoder, w *Worker, version byte) {
	e.str(w.ID)
	e.uvarint(uint64(w.Capacity))
	e.varint(w.RegisteredAt)
	e.varint(w.UpdatedAt)
	if version >= 3 {
		e.str(w.Version)
	}
}

func decodeWorker(d *decoder, w *Worker, version byte) {
	w.ID = d.str(MaxIDLen)
	w.Capacity = d.u32()
	w.RegisteredAt = d.varint()
	w.UpdatedAt = d.varint()
	if version >= 3 {
		w.Version = d.str(MaxVersionLen)
	}
	if d.err == nil {
		if err := checkID("worker.id", w.ID); err != nil || w.Capacity == 0 || checkVersion("worker.version", w.Version) != nil {
			d.fail("worker %q: bad id or version, or zero capacity", w.ID)
		}
	}
}

func encodeNode(e *encoder, n *Node, version byte) {
	e.str(n.ID)
	e.str(n.RaftAddr)
	e.str(n.APIAddr)
	e.varint(n.UpdatedAt)
	if version >= 4 {
		e.byte1(n.Level)
		e.str(n.Version)
	}
}

func decodeNode(d *decoder, n *Node, version byte) {
	n.ID = d.str(MaxIDLen)
	n.RaftAddr = d.str(MaxAddrLen)
	n.APIAddr = d.str(MaxAddrLen)
	n.UpdatedAt = d.varint()
	if version >= 4 {
		n.Level = d.byte1()
		n.Version = d.str(MaxVersionLen)
	}
	if d.err == nil {
		if err := (&SetNode{NodeID: n.ID, RaftAddr: n.RaftAddr, APIAddr: n.APIAddr, Level: n.Level, Version: n.Version}).Validate(); err != nil {
			d.fail("node %q: %v", n.ID, err)
		}
	}
}

func encodeJob(e *encoder, j *Job, version byte) {
	e.uvarint(j.Seq)
	encodeSpec(e, &j.JobSpec)
	e.byte1(uint8(j.State))
	e.uvarint(uint64(j.Attempts))
	e.uvarint(uint64(j.Losses))
	e.varint(j.SubmittedAt)
	e.varint(j.UpdatedAt)
	e.varint(j.FinishedAt())
	e.uvarint(j.FinishSeq())
	e.str(j.Reason())
	e.uvarint(j.CreateIndex)
	e.uvarint(j.ModifyIndex)
	ls := j.Leases()
	e.uvarint(uint64(len(ls)))
	for i := range ls {
		encodeLease(e, &ls[i])
	}
	if version >= 5 {
		e.varint(j.NotBefore)
		encodeRetry(e, j.Retry)
	}
	if version >= 6 {
		e.uvarint(uint64(j.TimeoutMs))
	}
}

func decodeJob(d *decoder, j *Job, version byte) {
	j.Seq = d.uvarint()
	decodeSpec(d, &j.JobSpec)
	j.State = JobState(d.byte1())
	j.Attempts = d.u32()
	j.Losses = d.u32()
	j.SubmittedAt = d.varint()
	j.UpdatedAt = d.varint()
	finishedAt, finishSeq := d.varint(), d.uvarint()
	j.setEnd(finishedAt, finishSeq, d.str(MaxMessageLen+64))
	j.CreateIndex = d.uvarint()
	j.ModifyIndex = d.uvarint()
	if n := d.count(MaxLeaseHistory); n > 0 {
		ls := make([]Lease, n)
		j.SetLeases(ls)
		for i := range ls {
			decodeLease(d, &ls[i])
		}
	}
	if version >= 5 {
		j.NotBefore = d.varint()
		j.Retry = decodeRetry(d)
		if j.NotBefore < 0 {
			d.fail("job %s: not before %d", j.ID, j.NotBefore)
		}
	}
	if version >= 6 {
		j.TimeoutMs = d.u32()
		if (&SubmitJob{TimeoutMs: j.TimeoutMs}).checkTimeout() != nil {
			d.fail("job %s: timeout %d ms", j.ID, j.TimeoutMs)
		}
	}
	if d.err == nil {
		if err := j.JobSpec.Validate(); err != nil {
			d.fail("job %s: %v", j.ID, err)
		}
		if _, ok := jobStateNames[j.State]; !ok {
			d.fail("job %s: state %d", j.ID, j.State)
		}
	}
}

func encodeLease(e *encoder, l *Lease) {
	e.uvarint(l.Token)
	e.str(l.WorkerID)
	e.str(l.RequestID)
	e.byte1(uint8(l.State))
	e.byte1(uint8(l.Revoke))
	e.varint(l.GrantedAt)
	e.varint(l.StartedAt)
	e.varint(l.EndedAt)
	e.str(l.ReportID())
	e.byte1(uint8(l.Outcome))
	e.bool(l.Retryable)
	e.str(l.Ref())
	e.str(l.Message())
	e.byte1(uint8(l.Answer))
}

func decodeLease(d *decoder, l *Lease) {
	l.Token = d.uvarint()
	l.WorkerID = d.keptStr(keptWorker, MaxIDLen)
	l.RequestID = d.keptStr(keptRequest, MaxIDLen)
	l.State = LeaseState(d.byte1())
	l.Revoke = Revoke(d.byte1())
	l.GrantedAt = d.varint()
	l.StartedAt = d.varint()
	l.EndedAt = d.varint()
	reportID := d.str(MaxIDLen)
	l.Outcome = Outcome(d.byte1())
	l.Retryable = d.bool()
	ref, message := d.str(MaxRefLen), d.str(MaxMessageLen)
	l.setReport(reportID, ref, message)
	l.Answer = JobState(d.byte1())
	_, okState := leaseStateNames[l.State]
	_, okRevoke := revokeNames[l.Revoke]
	_, okOutcome := outcomeNames[l.Outcome]
	_, okAnswer := jobStateNames[l.Answer]
	if !okState || !okRevoke || l.Outcome != 0 && !okOutcome || l.Answer != 0 && !okAnswer {
		d.fail("lease %d: bad enum", l.Token)
	}
	if d.err == nil {
		if checkID("worker_id", l.WorkerID) != nil || checkID("request_id", l.RequestID) != nil ||
			checkOptionalID("report_id", reportID) != nil || checkText("ref", ref, MaxRefLen) != nil ||
			checkText("message", message, MaxMessageLen) != nil {
			d.fail("lease %d: bad id or text", l.Token)
		}
	}
}

func encodeEvent(e *encoder, ev *Event, version byte) {
	e.uvarint(ev.Seq)
	e.uvarint(ev.Index)
	e.varint(ev.Time)
	e.byte1(uint8(ev.Type))
	e.str(ev.JobID)
	e.uvarint(ev.Token)
	e.str(ev.WorkerID)
	e.str(ev.Ref)
	e.str(ev.Detail)
	if version >= 2 {
		e.str(ev.Actor)
		e.str(ev.Source)
	}
}

func decodeEvent(d *decoder, ev *Event, version byte) {
	ev.Seq = d.uvarint()
	ev.Index = d.uvarint()
	ev.Time = d.varint()
	ev.Type = EventType(d.byte1())
	ev.JobID = d.str(MaxIDLen)
	ev.Token = d.uvarint()
	ev.WorkerID = d.str(MaxIDLen)
	ev.Ref = d.str(MaxRefLen)
	ev.Detail = d.str(MaxMessageLen + 256)
	if version >= 2 {
		ev.Actor = d.str(MaxActorLen)
		ev.Source = d.str(MaxAddrLen)
	}
	if _, ok := eventTypeNames[ev.Type]; !ok {
		d.fail("event %d: type %d", ev.Seq, ev.Type)
	}
}
