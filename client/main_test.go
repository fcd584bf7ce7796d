package client_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a Worker or Client starts must have ended by the time Run
// or Close returns; goleak checks it for the whole package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
