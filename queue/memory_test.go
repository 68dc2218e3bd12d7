package queue_test

import (
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/queue"
	"github.com/idemhook/idemhook/queue/queuetest"
)

func TestMemoryEngine(t *testing.T) {
	queuetest.Run(t, queuetest.Harness{New: func(tb testing.TB) (idemhook.Store, queue.Engine) {
		st, err := memstore.New(memstore.Config{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { st.Close() })
		return st, queue.NewMemory(st)
	}})
}
