package api

import (
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
)

// heapDumps lets one heap dump be written at a time: each stops the world
// and takes a file as large as the heap.
var heapDumps sync.Mutex

// heapDump answers with a dump of the node's heap after a collection
// (runtime/debug.WriteHeapDump): every live object with its address and
// size. Go's profiles sample allocations; the dump shows how full the
// spans that hold them are, which is where memory the state does not use
// goes (go run ./bench/holes reads it; docs/performance.md). The world
// stops while it is written (about 2 s for a million leases) and it takes
// a temporary file the size of the heap, so it is served with the
// profiles (pprof), to admins only, one at a time.
func (s *Server) heapDump(w http.ResponseWriter, r *http.Request) {
	if !heapDumps.TryLock() {
		http.Error(w, "a heap dump is being written; try again when it is done", http.StatusTooManyRequests)
		return
	}
	defer heapDumps.Unlock()
	f, err := os.CreateTemp("", "leasehold-heapdump-*")
	if err != nil {
		http.Error(w, "heap dump: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer os.Remove(f.Name())
	defer f.Close()
	runtime.GC()
	debug.WriteHeapDump(f.Fd())
	size, err := f.Seek(0, io.SeekEnd)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		http.Error(w, "heap dump: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="heapdump"`)
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	_, _ = io.Copy(w, f)
}
