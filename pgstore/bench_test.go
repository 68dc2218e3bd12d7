package pgstore_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/pgstore"
	"github.com/idemhook/idemhook/storetest"
)

// BenchmarkStore measures the middleware's store steps on the PostgreSQL of
// IDEMHOOK_POSTGRES_URL, with pgxpool's default pool. The steps are those
// of storetest.Bench. One is a claim plus a complete. The other is a claim
// that finds a stored response.
func BenchmarkStore(b *testing.B) {
	pool := pgtest.Pool(b)
	storetest.Bench(b, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newStore(tb, pool, pgstore.Config{}) },
	})
}

// BenchmarkStoreBatch is BenchmarkStore with Config.Batch, as the gateway
// runs it.
func BenchmarkStoreBatch(b *testing.B) {
	pool := pgtest.Pool(b)
	storetest.Bench(b, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newStore(tb, pool, pgstore.Config{Batch: true}) },
	})
}

// BenchmarkCompleteTx is a first delivery whose record commits in the
// handler's transaction. It runs Claim, then BEGIN, CompleteTx, COMMIT, then
// the Get by which the middleware sees the commit. Its "plain" sibling is
// the same transaction without CompleteTx, followed by the middleware's
// Complete. That is what a handler with its own transaction costs today.
func BenchmarkCompleteTx(b *testing.B) {
	pool := pgtest.Pool(b)
	st := newStore(b, pool, pgstore.Config{})
	for _, tx := range []bool{false, true} {
		name := "plain"
		if tx {
			name = "in-tx"
		}
		b.Run(name, func(b *testing.B) {
			var n atomic.Int64
			mw, err := idemhook.New(st, idemhook.Options{})
			if err != nil {
				b.Fatal(err)
			}
			route, err := mw.Route(idemhook.Route{Source: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				d, _ := idemhook.DeliveryFromContext(ctx)
				err := pgx.BeginFunc(ctx, pool, func(t pgx.Tx) error {
					if !tx {
						return nil
					}
					return st.CompleteTx(ctx, t, d, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, []byte(`{"ok":true}`))
				})
				if err != nil {
					b.Error(err)
				}
				if !tx {
					w.Header().Set("Content-Type", "application/json")
					w.Write([]byte(`{"ok":true}`)) //nolint:errcheck
				}
			}))
			prefix := fmt.Sprintf(`{"run":%q,"n":`, b.Name())
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(fmt.Sprint(prefix, n.Add(1), "}"))))
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
