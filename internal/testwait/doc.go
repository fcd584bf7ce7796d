// Package testwait is the tests' one way to wait: poll a condition until
// it holds, up to a bound scaled to the machine. A bound written for a
// quiet laptop (5s) is a flake under -race on two busy cores; the bound
// only decides how long a broken build takes to fail, so it can afford to
// grow.
package testwait
