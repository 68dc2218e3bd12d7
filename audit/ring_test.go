package audit_test

import (
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/audit/audittest"
)

// base is the time around which the tests' entries lie.
var base = audittest.Base

func newRing(t *testing.T, _ func() time.Time) audittest.Trail {
	r, err := audit.NewRing(audit.RingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRingConformance(t *testing.T) {
	audittest.Run(t, audittest.Harness{New: newRing})
}
