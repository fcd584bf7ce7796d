//go:build chaos_noselfstop

package client

// A deliberately broken build: a worker never self-stops: its jobs run on
// past the deadline, and past their leases' expiry.
const selfStop = false
