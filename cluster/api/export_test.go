package api

// SetMaxListedLeases lowers the lease refs a ListWorkers answer carries
// until the returned function restores it.
func SetMaxListedLeases(n int) (restore func()) {
	old := maxListedLeases
	maxListedLeases = n
	return func() { maxListedLeases = old }
}
