package gateway

import (
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/queue"
)

// A store that keeps no queue is refused with the same message the
// configuration's users know; a store that keeps one gives its engine.
func TestOpenEngine(t *testing.T) {
	type noQueue struct{ idemhook.Store }
	_, err := openEngine(t.Context(), noQueue{})
	if want := "deliver: queue needs the sqlite, postgres or memory store, not gateway.noQueue"; err == nil || err.Error() != want {
		t.Fatalf("openEngine(noQueue) = %v, want %q", err, want)
	}
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eng, err := openEngine(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := eng.(*queue.Memory); !ok {
		t.Fatalf("the memory store's engine is %T, want *queue.Memory", eng)
	}
}
