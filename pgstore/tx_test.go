package pgstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/pgstore"
)

// orders creates a business table for a test and returns its name. It
// holds one row per order written by a handler, with the event id, so that
// a test counts the effects.
func orders(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	table := pgtest.Table(t, pool, "test_orders")
	if _, err := pool.Exec(t.Context(), `CREATE TABLE "`+table+`" (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return table
}

func countRows(t *testing.T, pool *pgxpool.Pool, table, event string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM "`+table+`" WHERE event = $1`, event).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// serve puts h behind the middleware over st, on a real HTTP server.
func serve(t *testing.T, st idemhook.Store, rt idemhook.Route, h http.HandlerFunc) (*httptest.Server, *[]idemhook.DeliveryInfo) {
	t.Helper()
	var infos []idemhook.DeliveryInfo
	mw, err := idemhook.New(st, idemhook.Options{OnDelivery: func(d idemhook.DeliveryInfo) { infos = append(infos, d) }})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Source == "" {
		rt.Source = "shop"
	}
	route, err := mw.Route(rt)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(route(h))
	t.Cleanup(srv.Close)
	return srv, &infos
}

func send(t *testing.T, url, event string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"id":"`+event+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func eventOf(t *testing.T, r *http.Request) string {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Error(err)
	}
	return string(b)
}

func TestCompleteTxCommits(t *testing.T) {
	pool := pgtest.Pool(t)
	st := newStore(t, pool, pgstore.Config{})
	table := orders(t, pool)
	var runs atomic.Int32
	srv, infos := serve(t, st, idemhook.Route{}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		ctx := r.Context()
		d, ok := idemhook.DeliveryFromContext(ctx)
		if !ok {
			t.Error("no Delivery")
			return
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var id int64
			if err := tx.QueryRow(ctx, `INSERT INTO "`+table+`" (event) VALUES ($1) RETURNING id`, eventOf(t, r)).Scan(&id); err != nil {
				return err
			}
			body := fmt.Appendf(nil, `{"order":%d}`, id)
			return st.CompleteTx(ctx, tx, d, http.StatusCreated, http.Header{"Content-Type": {"application/json"}}, body)
		})
		if err != nil {
			t.Errorf("transaction: %v", err)
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	code, body, _ := send(t, srv.URL, "evt_commit")
	if code != http.StatusCreated || !strings.HasPrefix(body, `{"order":`) {
		t.Fatalf("first delivery: %d %q", code, body)
	}
	code2, body2, hdr := send(t, srv.URL, "evt_commit")
	if code2 != code || body2 != body || hdr.Get(idemhook.ReplayedHeader) != "true" || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("re-delivery: %d %q %v; want %d %q replayed", code2, body2, hdr, code, body)
	}
	if n := countRows(t, pool, table, `{"id":"evt_commit"}`); n != 1 || runs.Load() != 1 {
		t.Fatalf("%d rows, %d runs; want 1 and 1", n, runs.Load())
	}
	if (*infos)[0].Outcome != idemhook.OutcomeProcessed || (*infos)[1].Outcome != idemhook.OutcomeReplayed {
		t.Fatalf("outcomes %v, %v", (*infos)[0].Outcome, (*infos)[1].Outcome)
	}
}

func TestCompleteTxRollsBack(t *testing.T) {
	pool := pgtest.Pool(t)
	st := newStore(t, pool, pgstore.Config{})
	table := orders(t, pool)
	var runs atomic.Int32
	srv, infos := serve(t, st, idemhook.Route{}, func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		ctx := r.Context()
		d, _ := idemhook.DeliveryFromContext(ctx)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, `INSERT INTO "`+table+`" (event) VALUES ($1)`, eventOf(t, r)); err != nil {
			t.Error(err)
		}
		if err := st.CompleteTx(ctx, tx, d, http.StatusOK, nil, []byte("done")); err != nil {
			t.Error(err)
		}
		if n == 1 { // the first attempt fails after its writes
			tx.Rollback(ctx) //nolint:errcheck
			http.Error(w, "downstream failed", http.StatusBadGateway)
			return
		}
		if err := tx.Commit(ctx); err != nil {
			t.Error(err)
		}
	})
	if code, _, _ := send(t, srv.URL, "evt_rollback"); code != http.StatusBadGateway {
		t.Fatalf("first delivery: %d, want the handler's 502", code)
	}
	if (*infos)[0].Outcome != idemhook.OutcomeFailedReleased {
		t.Fatalf("first outcome %v", (*infos)[0].Outcome)
	}
	if code, body, hdr := send(t, srv.URL, "evt_rollback"); code != http.StatusOK || body != "done" || hdr.Get(idemhook.ReplayedHeader) != "" {
		t.Fatalf("retry: %d %q, want it to run and commit", code, body)
	}
	if code, body, hdr := send(t, srv.URL, "evt_rollback"); code != http.StatusOK || body != "done" || hdr.Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("third delivery: %d %q, want a replay", code, body)
	}
	if n := countRows(t, pool, table, `{"id":"evt_rollback"}`); n != 1 || runs.Load() != 2 {
		t.Fatalf("%d rows, %d runs; want 1 row from 2 runs", n, runs.Load())
	}
}

func TestCompleteSQLTx(t *testing.T) {
	pool := pgtest.Pool(t)
	st := newStore(t, pool, pgstore.Config{})
	table := orders(t, pool)
	// database/sql through pgx's stdlib driver. sql.Open("pgx", url) works
	// the same.
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	var runs atomic.Int32
	srv, _ := serve(t, st, idemhook.Route{}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		ctx := r.Context()
		d, _ := idemhook.DeliveryFromContext(ctx)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer tx.Rollback() //nolint:errcheck
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO "`+table+`" (event) VALUES ($1) RETURNING id`, eventOf(t, r)).Scan(&id); err != nil {
			t.Error(err)
		}
		if err := st.CompleteSQLTx(ctx, tx, d, http.StatusOK, nil, fmt.Appendf(nil, "order %d", id)); err != nil {
			t.Error(err)
		}
		if err := tx.Commit(); err != nil {
			t.Error(err)
		}
	})
	_, first, _ := send(t, srv.URL, "evt_sql")
	_, again, hdr := send(t, srv.URL, "evt_sql")
	if !strings.HasPrefix(first, "order ") || again != first || hdr.Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("first %q, re-delivery %q %v", first, again, hdr)
	}
	if n := countRows(t, pool, table, `{"id":"evt_sql"}`); n != 1 || runs.Load() != 1 {
		t.Fatalf("%d rows, %d runs", n, runs.Load())
	}
	var nilTx *sql.Tx
	if err := st.CompleteSQLTx(t.Context(), nilTx, nil, 200, nil, nil); err == nil {
		t.Fatal("CompleteSQLTx(nil tx): no error")
	}
}

// TestCompleteTxLostClaim covers a claim that is gone by the time the
// handler completes it (its lease lapsed and another delivery took the
// event over). CompleteTx fails with ErrNotOwner and the handler's writes
// roll back with it. The other delivery's effect is the only one.
func TestCompleteTxLostClaim(t *testing.T) {
	pool := pgtest.Pool(t)
	st := newStore(t, pool, pgstore.Config{})
	table := orders(t, pool)
	srv, infos := serve(t, st, idemhook.Route{}, func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		d, _ := idemhook.DeliveryFromContext(ctx)
		event := eventOf(t, r)
		// Another delivery takes the event over and commits its effect.
		if _, err := st.Delete(ctx, d.StoreKey()); err != nil {
			t.Error(err)
		}
		other := &idemhook.Record{State: idemhook.StatePending, Token: "other", CreatedAt: time.Now()}
		if existing, err := st.Claim(ctx, d.StoreKey(), other, idemhook.DefaultLease); err != nil || existing != nil {
			t.Errorf("the other claim: %v %v", existing, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO "`+table+`" (event) VALUES ($1)`, event); err != nil {
			t.Error(err)
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO "`+table+`" (event) VALUES ($1)`, event); err != nil {
				return err
			}
			return st.CompleteTx(ctx, tx, d, http.StatusOK, nil, []byte("mine"))
		})
		if !errors.Is(err, idemhook.ErrNotOwner) {
			t.Errorf("CompleteTx of a lost claim: %v, want ErrNotOwner", err)
		}
		w.WriteHeader(http.StatusConflict)
	})
	code, _, _ := send(t, srv.URL, "evt_lost")
	if code != http.StatusConflict {
		t.Fatalf("status %d", code)
	}
	if n := countRows(t, pool, table, `{"id":"evt_lost"}`); n != 1 {
		t.Fatalf("%d rows, want only the other delivery's", n)
	}
	if (*infos)[0].Outcome != idemhook.OutcomeFailedReleased {
		// Nothing was written in a transaction that committed, so the
		// middleware went the usual way. A 409 is not a success, so it
		// released the claim (which it no longer held).
		t.Fatalf("outcome %v", (*infos)[0].Outcome)
	}
}

// TestCompleteTxOtherStore: a Delivery whose claim another store holds is
// refused, with a message naming both.
func TestCompleteTxOtherStore(t *testing.T) {
	pool := pgtest.Pool(t)
	st := newStore(t, pool, pgstore.Config{})
	other := newStore(t, pool, pgstore.Config{})
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	for _, holder := range []idemhook.Store{ms, other} {
		srv, _ := serve(t, holder, idemhook.Route{}, func(w http.ResponseWriter, r *http.Request) {
			d, _ := idemhook.DeliveryFromContext(r.Context())
			err := pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
				return st.CompleteTx(r.Context(), tx, d, http.StatusOK, nil, nil)
			})
			if err == nil || !strings.Contains(err.Error(), "not by this store's table") {
				t.Errorf("CompleteTx with a Delivery of %T: %v", holder, err)
			}
		})
		send(t, srv.URL, "evt_other")
	}
	if err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return st.CompleteTx(t.Context(), tx, nil, http.StatusOK, nil, nil)
	}); err == nil || !strings.Contains(err.Error(), "nil *idemhook.Delivery") {
		t.Fatalf("CompleteTx(nil delivery): %v", err)
	}
}

// TestCompleteTxAnswerIsTheReplay: the answer to the delivery whose
// transaction committed and every replay of it are the same, header by
// header and byte by byte, whatever the handler set on its ResponseWriter,
// with either transaction API. A middleware around the route sets a header
// of its own on every answer, first and replays alike.
func TestCompleteTxAnswerIsTheReplay(t *testing.T) {
	pool := pgtest.Pool(t)
	st := newStore(t, pool, pgstore.Config{})
	table := orders(t, pool)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })

	// insertAndComplete records the order of r and completes d in one
	// transaction; between calls the handler sets headers (after).
	type completion func(r *http.Request, d *idemhook.Delivery, header http.Header, body []byte, after func()) error
	apis := []struct {
		name     string
		complete completion
	}{
		{"CompleteTx", func(r *http.Request, d *idemhook.Delivery, header http.Header, body []byte, after func()) error {
			ctx := r.Context()
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO "`+table+`" (event) VALUES ($1)`, eventOf(t, r)); err != nil {
					return err
				}
				if err := st.CompleteTx(ctx, tx, d, http.StatusCreated, header, body); err != nil {
					return err
				}
				after()
				return nil
			})
		}},
		{"CompleteSQLTx", func(r *http.Request, d *idemhook.Delivery, header http.Header, body []byte, after func()) error {
			ctx := r.Context()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck // a no-op after Commit
			if _, err := tx.ExecContext(ctx, `INSERT INTO "`+table+`" (event) VALUES ($1)`, eventOf(t, r)); err != nil {
				return err
			}
			if err := st.CompleteSQLTx(ctx, tx, d, http.StatusCreated, header, body); err != nil {
				return err
			}
			after()
			return tx.Commit()
		}},
	}
	tests := []struct {
		name   string
		replay []string          // Route.ReplayHeaders
		before map[string]string // set on the ResponseWriter before the completion
		give   http.Header       // the completion's header
		after  map[string]string // set on the ResponseWriter after it, before the commit
		want   http.Header       // both answers' headers, beside Date and Idempotent-Replayed
	}{
		{
			name:   "the route's replay headers set on the ResponseWriter",
			replay: []string{"Cache-Control", "X-Order-Source"},
			before: map[string]string{"Cache-Control": "no-store", "X-Order-Source": "webhook"},
			give:   http.Header{"Content-Type": {"application/json"}},
			want:   http.Header{"Content-Type": {"application/json"}, "Cache-Control": {"no-store"}, "X-Order-Source": {"webhook"}},
		},
		{
			name:   "headers the route doesn't store go out on neither",
			before: map[string]string{"Cache-Control": "no-store", "X-Trace": "t-1", "Content-Language": "pt-BR"},
			give:   http.Header{"Content-Type": {"application/json"}},
			want:   http.Header{"Content-Type": {"application/json"}, "Content-Language": {"pt-BR"}},
		},
		{
			name:   "the completion's header over the ResponseWriter's",
			replay: []string{"Cache-Control"},
			before: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/plain"},
			give:   http.Header{"cache-control": {"no-store"}},
			want:   http.Header{"Content-Type": {"text/plain"}, "Cache-Control": {"no-store"}},
		},
		{
			name:   "set after the completion: not in the record, so not sent",
			replay: []string{"Cache-Control"},
			give:   http.Header{"Content-Type": {"application/json"}},
			after:  map[string]string{"Cache-Control": "no-store", "Content-Type": "text/html"},
			want:   http.Header{"Content-Type": {"application/json"}},
		},
		{
			name:   "a header of the middleware around it is neither dropped nor changed",
			before: map[string]string{"X-Request-Id": "changed by the handler", "X-Trace": "t-2"},
			give:   http.Header{"Content-Type": {"application/json"}},
			want:   http.Header{"Content-Type": {"application/json"}},
		},
	}
	for _, api := range apis {
		for i, tt := range tests {
			t.Run(api.name+"/"+tt.name, func(t *testing.T) {
				mw, err := idemhook.New(st, idemhook.Options{})
				if err != nil {
					t.Fatal(err)
				}
				route, err := mw.Route(idemhook.Route{Source: "shop", ReplayHeaders: tt.replay})
				if err != nil {
					t.Fatal(err)
				}
				body := []byte(`{"order":"` + tt.name + `"}`)
				inner := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					d, ok := idemhook.DeliveryFromContext(r.Context())
					if !ok {
						t.Error("no Delivery")
						return
					}
					for name, v := range tt.before {
						w.Header().Set(name, v)
					}
					err := api.complete(r, d, tt.give, body, func() {
						for name, v := range tt.after {
							w.Header().Set(name, v)
						}
					})
					if err != nil {
						t.Errorf("transaction: %v", err)
						w.WriteHeader(http.StatusInternalServerError)
					}
				}))
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("X-Request-Id", "outer") // a middleware around the route
					inner.ServeHTTP(w, r)
				}))
				t.Cleanup(srv.Close)

				event := fmt.Sprintf("evt_answer_%s_%d", api.name, i)
				want := tt.want.Clone()
				want.Set("X-Request-Id", "outer")
				want.Set("Content-Length", fmt.Sprint(len(body)))
				var answers [3]*http.Response
				var bodies [3][]byte
				for n := range answers {
					resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"id":"`+event+`"}`))
					if err != nil {
						t.Fatal(err)
					}
					bodies[n], err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						t.Fatal(err)
					}
					answers[n] = resp
				}
				for n, resp := range answers {
					if replayed := resp.Header.Get(idemhook.ReplayedHeader) == "true"; replayed != (n > 0) {
						t.Fatalf("answer %d: replayed %t", n, replayed)
					}
					h := resp.Header.Clone()
					h.Del("Date")
					h.Del(idemhook.ReplayedHeader)
					if resp.StatusCode != http.StatusCreated || !reflect.DeepEqual(h, want) || !bytes.Equal(bodies[n], body) {
						t.Errorf("answer %d: %d %v %q\nwant         201 %v %q", n, resp.StatusCode, h, bodies[n], want, body)
					}
				}
				if rows := countRows(t, pool, table, `{"id":"`+event+`"}`); rows != 1 {
					t.Fatalf("%d orders, want 1", rows)
				}
			})
		}
	}
}
