// Package testutil holds what the repository's tests share across packages:
// the rigs that start a real Redis (redistest), a real PostgreSQL (pgtest)
// or a gateway with its traffic (gatewaytest), and the waiting they all do.
package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds. The deadline only guards against a
// hang and asserts nothing about speed.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
