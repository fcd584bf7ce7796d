//go:build !unix

package history

import (
	"fmt"
	"runtime"
)

// Now would return CLOCK_MONOTONIC, which every process of a run must
// share; off Unix there is none to share, and jepsen-lite needs Linux
// anyway. It panics, saying so: a history with times that do not compare
// across processes would be checked wrong.
func Now() int64 {
	panic(fmt.Sprintf("history: jepsen-lite needs Linux (a monotonic clock shared by every process of a run), not %s", runtime.GOOS))
}
