// Package clienttest helps test code built on package client: FakeClock
// drives a Worker's heartbeats, self-stop deadline and drain bound on a
// timeline the test moves by hand, so "the worker stops its jobs at
// lastAck + toleration − 2×renew" is checked as a fact about the fake
// timeline, whatever the machine's speed.
package clienttest
