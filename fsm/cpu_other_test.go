//go:build !unix

package fsm

import "time"

// processCPU is not read on this system: benchmarks report 0.
func processCPU() time.Duration { return 0 }
