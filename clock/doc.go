// Package clock is the one time seam of leasehold: the worker runtime in
// package client measures heartbeats and its self-stop deadline on a Clock,
// and package cluster runs the leader's expiry table on one. Production
// code uses System (suspend-aware on Linux); tests use clocktest.FakeClock,
// which moves only when told.
//
// It is a leaf (the standard library and x/sys only), so the client, which
// must stay importable without the server's dependencies, and the server
// share it.
package clock
