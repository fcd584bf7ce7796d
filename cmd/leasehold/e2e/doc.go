// Package e2e holds end-to-end tests of the leasehold binary: TestMain
// builds cmd/leasehold once, and each test drives it as a user would, as
// real processes (servers, workers, CLI commands) on loopback ports of its
// own. It has no code of its own; the tests live in *_test.go files.
//
// Every process a test starts is killed and waited for when the test ends.
// Child processes get an environment without LEASEHOLD_* variables, so a
// developer's settings (say LEASEHOLD_ENDPOINTS pointing at a running
// `leasehold dev`) never leak into a test. With -short the tests are
// skipped and nothing is built.
package e2e
