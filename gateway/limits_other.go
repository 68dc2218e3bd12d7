//go:build !unix

package gateway

// openFileLimit returns 0: no open-file limit known on this system.
func openFileLimit() uint64 { return 0 }
