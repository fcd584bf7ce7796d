//go:build !chaos

package main

import "github.com/leasehold/leasehold/cluster"

// serverClock is the node's clock: CLOCK_BOOTTIME. Only a chaos build
// (clock_chaos.go) lets a tester skew it.
func serverClock() cluster.Clock { return cluster.SystemClock() }
