package sqliteaudit_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/audit/sqliteaudit"
	"github.com/idemhook/idemhook/sqlitestore"
)

func ExampleNew() {
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

	trail, err := sqliteaudit.New(db, sqliteaudit.Config{Retention: 7 * 24 * time.Hour})
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
