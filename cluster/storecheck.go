package cluster

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	walmetrics "github.com/hashicorp/raft-wal/metrics"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/leasehold/leasehold/fsm"
)

// The files of a data dir (besides node-id): Raft's log and stable store,
// its snapshot store, and the mark of a node that has been a member.
const (
	raftDBFile   = "raft.db"   // log_store "boltdb"
	walDir       = "wal"       // log_store "wal": hashicorp/raft-wal's segments and meta
	snapshotsDir = "snapshots" // hashicorp/raft's FileSnapshotStore
	memberFile   = "raft.member"
)

// Log stores a node can keep its Raft log and stable store in.
const (
	LogStoreWAL    = "wal"    // hashicorp/raft-wal: one fsync per append, a CRC per record
	LogStoreBoltDB = "boltdb" // hashicorp/raft-boltdb/v2: two fsyncs per append
)

// raftStore is a Raft log and stable store in one, as both kinds are.
type raftStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// Keys of Raft's stable store (hashicorp/raft raft.go).
var (
	keyCurrentTerm  = []byte("CurrentTerm")
	keyLastVoteTerm = []byte("LastVoteTerm")
)

// dataDir is what the startup checks found in a data dir.
type dataDir struct {
	path      string
	snapshots []raft.SnapshotMeta // newest first, each read and checked in full
	member    bool                // raft.member exists: the node has had a Raft term
	// hasState: a current term, log entries or a snapshot, as
	// raft.HasExistingState says; a node without joins or bootstraps.
	hasState bool
}

func (d *dataDir) file(name string) string { return filepath.Join(d.path, name) }

// past says what shows the node had a life before this start (it must then
// have a log and a stable store), or "" when nothing does.
func (d *dataDir) past() string {
	if len(d.snapshots) > 0 {
		s := d.snapshots[0]
		return fmt.Sprintf("snapshot %s (index %d, term %d) exists", s.ID, s.Index, s.Term)
	}
	if d.member {
		return fmt.Sprintf("%s says this node has been a cluster member", d.file(memberFile))
	}
	return ""
}

// openStorage checks the data dir and opens raft.db. It refuses, with a
// *StorageError, a log or stable store that is missing, empty or damaged
// while the rest of the dir shows the node had a past (Raft would start it
// with no term and no vote, free to vote twice, or panic at the first entry
// it cannot read), and a damaged snapshot (Raft would skip it, and restore
// an older one or none, short of the entries the log dropped after it).
// Every snapshot, every page of raft.db and every entry Raft will read are
// read before Raft sees any of them; where the libraries panic on a damaged
// file, the panic is an error here.
func openStorage(dir, kind string, walSegment int) (raftStore, *dataDir, error) {
	d := &dataDir{path: dir}
	var err error
	if d.snapshots, err = checkSnapshots(d.file(snapshotsDir)); err != nil {
		return nil, nil, err
	}
	switch _, err := os.Stat(d.file(memberFile)); {
	case err == nil:
		d.member = true
	case !errors.Is(err, os.ErrNotExist):
		return nil, nil, &StorageError{Path: d.file(memberFile), Problem: err.Error()}
	}
	// A data dir keeps the log where it was first kept: a node switched to
	// the other kind would start with no log, term or vote.
	other, otherKind := d.file(walDir), LogStoreWAL
	if kind == LogStoreWAL {
		other, otherKind = d.file(raftDBFile), LogStoreBoltDB
	}
	if _, err := os.Stat(other); err == nil {
		return nil, nil, &StorageError{Path: other, Problem: fmt.Sprintf(
			"exists: this node keeps its log in %s (log_store = %q), not in %s: set log_store back, or replace the node (see docs/operations.md)",
			otherKind, otherKind, kind)}
	}
	if kind == LogStoreWAL {
		return openWAL(d, walSegment)
	}
	return openBolt(d)
}

// openBolt checks and opens raft.db.
func openBolt(d *dataDir) (raftStore, *dataDir, error) {
	path := d.file(raftDBFile)
	bad := func(format string, args ...any) error {
		return &StorageError{Path: path, Problem: fmt.Sprintf(format, args...)}
	}
	switch fi, err := os.Stat(path); {
	case errors.Is(err, os.ErrNotExist), err == nil && fi.Size() == 0:
		if why := d.past(); why != "" {
			what := "is missing"
			if err == nil {
				what = "is empty"
			}
			return nil, nil, bad("%s, but %s: this node's Raft log, term and vote are lost", what, why)
		}
	case err != nil:
		return nil, nil, bad("%v", err)
	default:
		if err := checkBoltFile(path); err != nil {
			return nil, nil, err
		}
	}
	// fsync on every append: NoSync is never set.
	var store *raftboltdb.BoltStore
	if err := noPanic(func() (err error) {
		store, err = raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: time.Second}})
		return err
	}); err != nil {
		return nil, nil, boltOpenError(path, err)
	}
	if err := noPanic(func() error { return checkLog(store, store, d, path) }); err != nil {
		store.Close()
		var se *StorageError
		if !errors.As(err, &se) {
			err = bad("damaged: %v", err)
		}
		return nil, nil, err
	}
	return store, d, nil
}

// openWAL checks and opens the WAL directory: present and holding segments
// wherever the node had a past; opened (raft-wal verifies the last
// segment's records and truncates a torn tail write); and every entry
// Raft will read checked as for boltdb.
func openWAL(d *dataDir, segment int) (raftStore, *dataDir, error) {
	path := d.file(walDir)
	bad := func(format string, args ...any) error {
		return &StorageError{Path: path, Problem: fmt.Sprintf(format, args...)}
	}
	entries, err := os.ReadDir(path)
	switch {
	case errors.Is(err, os.ErrNotExist) || err == nil && len(entries) == 0:
		if why := d.past(); why != "" {
			what := "is missing"
			if err == nil {
				what = "is empty"
			}
			return nil, nil, bad("%s, but %s: this node's Raft log, term and vote are lost", what, why)
		}
		if err := os.MkdirAll(path, 0o700); err != nil {
			return nil, nil, bad("%v", err)
		}
	case err != nil:
		return nil, nil, bad("%v", err)
	}
	// raft-wal opens its meta file without a timeout: a second process on
	// the same data dir would wait for ever. Ask for the lock first.
	metaPath := filepath.Join(path, metadb.FileName)
	if _, err := os.Stat(metaPath); err == nil {
		db, err := bbolt.Open(metaPath, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			return nil, nil, boltOpenError(metaPath, err)
		}
		db.Close()
	}
	store := &walStore{path: path, segment: segment}
	if err := store.open(); err != nil {
		return nil, nil, bad("cannot be opened: %v", err)
	}
	if err := noPanic(func() error { return checkLog(store, store, d, path) }); err != nil {
		store.Close()
		var se *StorageError
		if !errors.As(err, &se) {
			err = bad("damaged: %v", err)
		}
		return nil, nil, err
	}
	return store, d, nil
}

// walStore is raft-wal with the meta store it was opened with (which the
// WAL's own Close leaves open, and locked), reopened after a failed write:
// a WAL whose append failed (a full disk) refuses every later one until it
// is opened again, when it drops the torn tail by its checksums. Raft
// retries what it could not store, so a node recovers in place once space
// is back, as on boltdb.
type walStore struct {
	path    string
	segment int

	mu     sync.RWMutex // writes and reopening hold it; reads share it
	cur    *wal.WAL
	meta   *metadb.BoltMetaDB
	broken bool // the last write failed: reopen before the next
}

func (s *walStore) open() error {
	meta := &metadb.BoltMetaDB{}
	var w *wal.WAL
	if err := noPanic(func() (err error) {
		// Its measurements go to go-metrics' process-wide instance, which
		// /metrics serves (promsink.go).
		w, err = wal.Open(s.path, wal.WithMetaStore(meta), wal.WithSegmentSize(s.segment),
			wal.WithMetricsCollector(walmetrics.NewGoMetricsCollector([]string{"raft", "wal"}, nil, nil)))
		return err
	}); err != nil {
		meta.Close()
		return err
	}
	s.cur, s.meta, s.broken = w, meta, false
	return nil
}

// writing runs a write, reopening a WAL a failed write left broken first.
func (s *walStore) writing(f func(w *wal.WAL) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken {
		s.cur.Close()
		s.meta.Close()
		if err := s.open(); err != nil {
			s.broken = true
			return fmt.Errorf("reopening the WAL after a failed write: %w", err)
		}
	}
	err := f(s.cur)
	if err != nil {
		s.broken = true
	}
	return err
}

func (s *walStore) reading() (*wal.WAL, func()) {
	s.mu.RLock()
	return s.cur, s.mu.RUnlock
}

func (s *walStore) FirstIndex() (uint64, error) {
	w, done := s.reading()
	defer done()
	return w.FirstIndex()
}

func (s *walStore) LastIndex() (uint64, error) {
	w, done := s.reading()
	defer done()
	return w.LastIndex()
}

func (s *walStore) GetLog(index uint64, l *raft.Log) error {
	w, done := s.reading()
	defer done()
	return w.GetLog(index, l)
}

func (s *walStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *walStore) StoreLogs(logs []*raft.Log) error {
	return s.writing(func(w *wal.WAL) error { return w.StoreLogs(logs) })
}

func (s *walStore) DeleteRange(lo, hi uint64) error {
	return s.writing(func(w *wal.WAL) error { return w.DeleteRange(lo, hi) })
}

func (s *walStore) Set(k, v []byte) error {
	return s.writing(func(w *wal.WAL) error { return w.Set(k, v) })
}

func (s *walStore) SetUint64(k []byte, v uint64) error {
	return s.writing(func(w *wal.WAL) error { return w.SetUint64(k, v) })
}

func (s *walStore) Get(k []byte) ([]byte, error) {
	w, done := s.reading()
	defer done()
	return w.Get(k)
}

func (s *walStore) GetUint64(k []byte) (uint64, error) {
	w, done := s.reading()
	defer done()
	return w.GetUint64(k)
}

// IsMonotonic tells Raft the WAL takes only consecutive indexes
// (raft.MonotonicLogStore).
func (s *walStore) IsMonotonic() bool { return true }

func (s *walStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.cur.Close(), s.meta.Close())
}

// checkSnapshots reads every snapshot in the snapshot store: a meta.json
// that parses and agrees with its directory, and a state.bin of its size
// and CRC-64 (what Raft checks when it opens one). Directories Raft is
// still writing (.tmp) are Raft's to discard.
func checkSnapshots(root string) ([]raft.SnapshotMeta, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &StorageError{Path: root, Problem: err.Error()}
	}
	var out []raft.SnapshotMeta
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		meta, err := checkSnapshot(filepath.Join(root, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, meta)
	}
	// Newest first, as Raft orders them.
	slices.SortFunc(out, func(a, b raft.SnapshotMeta) int {
		return cmp.Or(cmp.Compare(b.Term, a.Term), cmp.Compare(b.Index, a.Index), strings.Compare(b.ID, a.ID))
	})
	return out, nil
}

// fileSnapshotMeta is a snapshot's meta.json (hashicorp/raft
// file_snapshot.go): its metadata and the CRC-64 of its state.bin.
type fileSnapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

func checkSnapshot(dir string) (raft.SnapshotMeta, error) {
	metaPath, statePath := filepath.Join(dir, "meta.json"), filepath.Join(dir, "state.bin")
	bad := func(path, format string, args ...any) (raft.SnapshotMeta, error) {
		return raft.SnapshotMeta{}, &StorageError{Path: path, Problem: fmt.Sprintf(format, args...)}
	}
	b, err := os.ReadFile(metaPath)
	if err != nil {
		return bad(metaPath, "%v", err)
	}
	var m fileSnapshotMeta
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return bad(metaPath, "not a snapshot's metadata: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad(metaPath, "not a snapshot's metadata: bytes after the JSON object")
	}
	switch {
	case m.ID != filepath.Base(dir):
		return bad(metaPath, "names snapshot %q, not its directory's", m.ID)
	case m.Version < raft.SnapshotVersionMin || m.Version > raft.SnapshotVersionMax:
		return bad(metaPath, "snapshot version %d is not one this build reads", m.Version)
	case m.Index == 0 || m.Term == 0 || m.Size < 0:
		return bad(metaPath, "impossible index %d, term %d or size %d", m.Index, m.Term, m.Size)
	case len(m.CRC) != crc64.Size:
		return bad(metaPath, "has no CRC of the state")
	}
	f, err := os.Open(statePath)
	if err != nil {
		return bad(statePath, "%v", err)
	}
	defer f.Close()
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	n, err := io.Copy(h, f)
	switch {
	case err != nil:
		return bad(statePath, "cannot be read: %v", err)
	case n != m.Size:
		return bad(statePath, "%d bytes, but meta.json says %d: truncated or damaged", n, m.Size)
	case !bytes.Equal(h.Sum(nil), m.CRC):
		return bad(statePath, "does not match the CRC in meta.json: damaged")
	}
	return m.SnapshotMeta, nil
}

// checkBoltFile checks raft.db as a bbolt file, opened read-only: it is as
// long as its pages say (bbolt maps the file, and a read past the end of a
// truncated one is a fault), every page of its buckets can be walked, and
// bbolt's own check passes (every page reachable or free, once; keys in
// order).
func checkBoltFile(path string) error {
	bad := func(format string, args ...any) error {
		return &StorageError{Path: path, Problem: fmt.Sprintf(format, args...)}
	}
	var db *bbolt.DB
	if err := noPanic(func() (err error) {
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
		return err
	}); err != nil {
		return boltOpenError(path, err)
	}
	defer db.Close()
	err := noPanic(func() error {
		return db.View(func(tx *bbolt.Tx) error {
			fi, err := os.Stat(path)
			if err != nil {
				return err
			}
			if fi.Size() < tx.Size() {
				return bad("truncated: %d bytes, but its pages need %d", fi.Size(), tx.Size())
			}
			// Walked here, where a fault is an error, before bbolt's check
			// walks them on a goroutine of its own.
			err = tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
				return b.ForEach(func(k, v []byte) error { return nil })
			})
			if err != nil {
				return err
			}
			// Drained to the end: bbolt's goroutine sends every error.
			var first error
			for err := range tx.Check() {
				if first == nil {
					first = err
				}
			}
			return first
		})
	})
	var se *StorageError
	if err != nil && !errors.As(err, &se) {
		err = bad("damaged: %v", err)
	}
	return err
}

func boltOpenError(path string, err error) error {
	if errors.Is(err, berrors.ErrTimeout) {
		return &StorageError{Path: path, Problem: "is locked by another process: is another leasehold running on this data dir?"}
	}
	return &StorageError{Path: path, Problem: fmt.Sprintf("cannot be opened: %v", err)}
}

// checkLog checks the log and stable store as Raft will read them, through
// their interfaces (so any log store gets the same checks): a current term
// wherever the node had a past, and not behind its snapshots; and the
// entries from the last one down, as far as they run without a gap: every
// one Raft will apply (those after the newest snapshot) is there, is the
// entry its index says, has a term in order, and a command passes its
// checksum and a configuration decodes. Entries below a gap are those Raft
// left behind a restored snapshot; it never reads them.
func checkLog(logs raft.LogStore, stable raft.StableStore, d *dataDir, path string) error {
	bad := func(format string, args ...any) error {
		return &StorageError{Path: path, Problem: fmt.Sprintf(format, args...)}
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return bad("the log cannot be read: %v", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return bad("the log cannot be read: %v", err)
	}
	var term uint64
	switch v, err := stable.Get(keyCurrentTerm); {
	case notFound(err), err == nil && len(v) == 0: // raft-wal answers a missing key so
	case err != nil:
		return bad("the current term cannot be read: %v", err)
	case len(v) != 8:
		return bad("the current term is %d bytes long, not 8: damaged", len(v))
	default:
		term = binary.BigEndian.Uint64(v)
	}
	if v, err := stable.Get(keyLastVoteTerm); err == nil && len(v) != 0 && len(v) != 8 {
		return bad("the last vote's term is %d bytes long, not 8: damaged", len(v))
	}
	d.hasState = term > 0 || last > 0 || len(d.snapshots) > 0
	if term == 0 {
		why := d.past()
		if last > 0 {
			why = fmt.Sprintf("it holds log entries %d to %d", first, last)
		}
		if why != "" {
			return bad("holds no current term, but %s: this node's term and vote are lost", why)
		}
		return nil
	}
	var snap raft.SnapshotMeta
	if len(d.snapshots) > 0 {
		snap = d.snapshots[0]
	}
	if term < snap.Term {
		return bad("its current term %d is behind the term %d of snapshot %s: raft.db is older than the snapshots (an old copy?)",
			term, snap.Term, snap.ID)
	}
	if last == 0 {
		return nil
	}
	if first > snap.Index+1 {
		return bad("the log starts at entry %d, but entries from %d are needed (the newest snapshot ends at %d): entries are missing",
			first, snap.Index+1, snap.Index)
	}
	next := raft.Log{Term: term} // the entry after the one being checked
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		err := logs.GetLog(i, &l)
		switch {
		case errors.Is(err, raft.ErrLogNotFound) && i <= snap.Index:
			return nil
		case errors.Is(err, raft.ErrLogNotFound):
			return bad("log entry %d is missing (the log runs from %d to %d, all after snapshot index %d needed)", i, first, last, snap.Index)
		case err != nil:
			return bad("log entry %d cannot be read: %v", i, err)
		}
		switch {
		case l.Index != i:
			return bad("log entry %d says it is entry %d: damaged", i, l.Index)
		case l.Term > next.Term:
			return bad("log entry %d has term %d, later than %d (the next entry's, or the current term): damaged", i, l.Term, next.Term)
		case l.Type > raft.LogConfiguration:
			return bad("log entry %d has an unknown type %d: damaged", i, l.Type)
		}
		switch l.Type {
		case raft.LogCommand:
			if err := fsm.VerifyChecksum(l.Data); err != nil {
				return bad("log entry %d: %v", i, err)
			}
		case raft.LogConfiguration:
			if err := noPanic(func() error { raft.DecodeConfiguration(l.Data); return nil }); err != nil {
				return bad("log entry %d: the configuration does not decode: %v", i, err)
			}
		}
		next = l
	}
	return nil
}

// notFound is how Raft tells a missing stable-store key from a failure
// (hashicorp/raft api.go compares the message too).
func notFound(err error) bool { return err != nil && err.Error() == "not found" }

// noPanic runs f and returns its error, or the panic it raised as one: the
// storage libraries panic on some damaged files, and a read past the end of
// a truncated memory-mapped file is a fault, which SetPanicOnFault makes a
// panic on this goroutine.
func noPanic(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return f()
}

// markMember writes raft.member once the node has a Raft term: from then
// on, a data dir that has lost raft.db is refused even without snapshots
// (a node that has had a term may have voted, and may hold entries a
// quorum counted on).
func markMember(dir, nodeID string) error {
	path := filepath.Join(dir, memberFile)
	tmp := path + ".tmp"
	body := fmt.Sprintf("node %s has had a Raft term: it must not start without raft.db (see docs/operations.md)\n", nodeID)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(body)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	return err
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
