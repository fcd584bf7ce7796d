// Package poll is the one loop that waits for a condition by asking it
// again: the local cluster launcher, the chaos runner and the tests' waits
// (testwait) all use it, so none sleeps a fixed time and hopes.
package poll
