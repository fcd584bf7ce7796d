// Package integration holds end-to-end tests of the API, the Go client and
// the worker runtime against real in-process clusters (package
// cluster/clustertest). It has no code of its own: it exists so the tests
// can import both sides without either importing the other.
package integration
