package pgaudit_test

import (
	"context"
	"log"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/audit/pgaudit"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ExampleNew needs a PostgreSQL server, so it is compiled but not run. The
// tests run the same code when IDEMHOOK_POSTGRES_URL is set.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	trail, err := pgaudit.New(ctx, pool, pgaudit.Config{}) // table idemhook_audit_deliveries
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
