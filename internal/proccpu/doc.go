// Package proccpu reads the CPU time the running process has used, for the
// bench's load generator and the state machine's benchmarks.
package proccpu
