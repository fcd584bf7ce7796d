package client

import "github.com/leasehold/leasehold/clock"

// SystemClock is clock.System, the worker runtime's default clock: on Linux
// it keeps counting while the machine is suspended, so a machine that slept
// past a worker's self-stop deadline stops the worker's jobs the moment it
// wakes, rather than letting them run on after their leases expired.
func SystemClock() clock.Clock { return clock.System() }
