package audit_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/jackc/pgx/v5/pgxpool"
)

func ExampleNewSQLite() {
	dir, err := os.MkdirTemp("", "idemhook-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "idemhook.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	trail, err := audit.NewSQLite(db, audit.SQLiteConfig{Retention: 7 * 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer trail.Close()

	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	err = trail.Write(ctx, []audit.Entry{
		{Time: t0, Route: "/webhooks/stone", Source: "stone", Key: "sha256:9f86d0", Outcome: "processed", Status: 200},
		{Time: t0.Add(time.Second), Route: "/webhooks/stone", Source: "stone", Key: "sha256:9f86d0", Outcome: "replayed", Status: 200},
		{Time: t0.Add(2 * time.Second), Route: "/webhooks/stripe", Source: "stripe", Key: "evt_1", Outcome: "processed", Status: 200},
	})
	if err != nil {
		log.Fatal(err)
	}

	// Newest first, one entry per page.
	f := audit.Filter{Source: "stone", Limit: 1}
	for {
		page, err := trail.Query(ctx, f)
		if err != nil {
			log.Fatal(err)
		}
		for _, e := range page.Entries {
			fmt.Println(e.Time.Format(time.TimeOnly), e.Source, e.Key, e.Outcome)
		}
		if page.Next == "" {
			break
		}
		f.Cursor = page.Next
	}
	// Output:
	// 12:00:01 stone sha256:9f86d0 replayed
	// 12:00:00 stone sha256:9f86d0 processed
}

// ExampleNewPostgres needs a PostgreSQL server, so it is compiled but not
// run; the tests run the same code when IDEMHOOK_POSTGRES_URL is set.
func ExampleNewPostgres() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	trail, err := audit.NewPostgres(ctx, pool, audit.PostgresConfig{}) // table idemhook_audit_deliveries
	if err != nil {
		log.Fatal(err)
	}
	defer trail.Close()
	recorder := audit.NewRecorder(trail, audit.RecorderConfig{})
	recorder.Record(audit.Entry{Time: time.Now(), Source: "stone", Outcome: "processed", Status: 200})
	if err := recorder.Close(ctx); err != nil {
		log.Fatal(err)
	}
}

func ExampleNewLog() {
	// A handler without the time, so that the output is stable.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
	sink := audit.NewLog(logger)
	sink.Write(context.Background(), []audit.Entry{{
		Time: time.Now(), Route: "/webhooks/stone", Source: "stone", Key: "sha256:9f86d0", Outcome: "replayed",
		Status: 200, Duration: 850 * time.Microsecond, RequestBytes: 412, ResponseBytes: 17,
	}})
	// Output:
	// level=INFO msg="webhook delivery" route=/webhooks/stone source=stone key=sha256:9f86d0 outcome=replayed status=200 duration=850µs request_bytes=412 response_bytes=17
}

func ExampleNewRecorder() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
	recorder := audit.NewRecorder(audit.NewLog(logger), audit.RecorderConfig{})

	// On the request path: Record never blocks.
	recorder.Record(audit.Entry{Time: time.Now(), Route: "/webhooks/stone", Source: "stone", Key: "evt_1", Outcome: "processed", Status: 200})

	// At shutdown: flush what is queued, within a bound.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := recorder.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("dropped:", recorder.Dropped())
	// Output:
	// level=INFO msg="webhook delivery" route=/webhooks/stone source=stone key=evt_1 outcome=processed status=200 duration=0s request_bytes=0 response_bytes=0
	// dropped: 0
}
