// Package testbin gives tests the leasehold binary, built once per test
// process, or once for a whole run: `make test` builds it first and names
// it in $LEASEHOLD_TEST_BIN, and every package's tests run that one.
package testbin
