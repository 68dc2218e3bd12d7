package hookchain_test

import (
	"slices"
	"testing"

	"github.com/idemhook/idemhook/internal/hookchain"
)

func TestThen(t *testing.T) {
	var calls []string
	next := func(v int) { calls = append(calls, "next") }
	hookchain.Then(nil, next)(1)
	if !slices.Equal(calls, []string{"next"}) {
		t.Fatalf("no first hook: calls %v; want next only", calls)
	}
	calls = nil
	hookchain.Then(func(v int) { calls = append(calls, "first") }, next)(1)
	if !slices.Equal(calls, []string{"first", "next"}) {
		t.Fatalf("calls %v; want first, then next", calls)
	}
}
