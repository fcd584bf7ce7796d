//go:build !unix

package proccpu

import "time"

// Self: off Unix there is no getrusage; 0, as when it fails, reads as not
// measured.
func Self() time.Duration { return 0 }
