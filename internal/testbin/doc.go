// Package testbin gives tests the leasehold binary, built once per test
// process, or once for a whole run: `make test` builds it first and names
// it in $LEASEHOLD_TEST_BIN, and every package's tests run that one. It
// also starts the processes a test drives (Start, StartServer, Run), keeps
// their output for the test to read, and stops them when the test ends;
// KillAtEnd does the same for a test's local cluster.
package testbin
