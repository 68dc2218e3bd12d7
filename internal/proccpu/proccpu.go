// Package proccpu reads the CPU time the process has used, for the
// benchmarks and the load command that report CPU per request.
package proccpu

import "time"

// Used returns the CPU time, user plus system, this process has used so
// far. It returns 0 where the platform doesn't tell (see proccpu_unix.go).
func Used() time.Duration { return used() }
