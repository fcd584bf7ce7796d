//go:build !unix

package bench

import "time"

// selfCPU: off Unix there is no getrusage; 0, as when it fails, reads as
// not measured. (The servers' CPU comes from /proc: the bench's figures
// need Linux.)
func selfCPU() time.Duration { return 0 }
