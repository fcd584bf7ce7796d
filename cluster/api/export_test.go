package api

// SetMaxListedLeases lowers the lease refs a ListWorkers answer carries
// until the returned function restores it.
func SetMaxListedLeases(n int) (restore func()) {
	old := maxListedLeases
	maxListedLeases = n
	return func() { maxListedLeases = old }
}

// ListedBodies counts the HTTP/2 request bodies the server's watch times
// now (bodyWatch).
func (s *Server) ListedBodies() int {
	if s.watch == nil {
		return 0
	}
	return s.watch.listed()
}

// HoldHeapDump takes the heap dump's lock, as a dump being written would,
// until the returned function releases it.
func HoldHeapDump() (release func()) {
	heapDumps.Lock()
	return heapDumps.Unlock
}
