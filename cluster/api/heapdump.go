package api

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
)

// heapDumps lets one heap dump be written at a time: each stops the world
// and takes a file as large as the heap.
var heapDumps sync.Mutex

// heapDumpRate is the slowest a dump's download may be before its write
// deadline cuts it: the deadline is write_timeout plus the dump's size at
// this rate.
const heapDumpRate = 1 << 20 // bytes a second

// serveHeapDump answers with a dump of the node's heap after a collection
// (runtime/debug.WriteHeapDump): every live object with its address, size
// and contents. Go's profiles sample allocations; the dump shows how full
// the spans that hold them are, which is where memory the state does not
// use goes (go run ./bench/holes reads it; docs/performance-history.md).
//
// The contents are everything the process holds: token secrets, private
// keys, payloads. So the dump has a switch of its own (Options.HeapDump,
// off by default), is served to admins only, and with authentication off
// only to a caller on the node's own host; every dump served is audited.
// The world stops while it is written (seconds for a large state) and it
// takes a temporary file the size of the heap, so one is written at a
// time.
func (s *Server) serveHeapDump(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "a heap dump is a GET", http.StatusMethodNotAllowed)
		return
	}
	id := identityOf(r.Context())
	if !s.creds.Load().Enabled() && !localCaller(r.RemoteAddr, id) {
		http.Error(w, "a heap dump holds the node's secrets: with authentication off it is served only on the node's own host",
			http.StatusForbidden)
		return
	}
	if !heapDumps.TryLock() {
		http.Error(w, "a heap dump is being written; try again when it is done", http.StatusTooManyRequests)
		return
	}
	defer heapDumps.Unlock()
	size, err := s.writeHeapDump(w)
	s.node.AuditAsync(auditRecord(id, "debug.heapdump", fmt.Sprintf("%d bytes: %s", size, outcome(err))))
	if err != nil {
		s.log.Warn("heap_dump_failed", "error", err)
	}
}

// writeHeapDump dumps the heap into a temporary file and copies it to w.
func (s *Server) writeHeapDump(w http.ResponseWriter) (int64, error) {
	f, err := os.CreateTemp("", "leasehold-heapdump-*")
	if err != nil {
		http.Error(w, "heap dump: "+err.Error(), http.StatusInternalServerError)
		return 0, err
	}
	// Removed at once where an open file may be (so a node that dies
	// meanwhile leaves nothing behind), else when done.
	if os.Remove(f.Name()) != nil {
		defer os.Remove(f.Name())
	}
	defer f.Close()
	runtime.GC()
	debug.WriteHeapDump(f.Fd())
	size, err := f.Seek(0, io.SeekEnd)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		http.Error(w, "heap dump: "+err.Error(), http.StatusInternalServerError)
		return 0, err
	}
	if s.limits.WriteTimeout > 0 {
		// The write deadline was lifted for the dump's writing; the
		// download has one again.
		d := s.limits.WriteTimeout + time.Duration(size/heapDumpRate)*time.Second
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="heapdump"`)
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	n, err := io.Copy(w, f)
	if err == nil && n != size {
		err = fmt.Errorf("sent %d of %d bytes", n, size)
	}
	return size, err
}

// localCaller says whether a request comes from the node's own host: a
// loopback address, not forwarded by another member.
func localCaller(remote string, id Identity) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil || id.Via != "" {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
