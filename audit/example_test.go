package audit_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/idemhook/idemhook/audit"
)

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

func ExampleNewTally() {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	entries := []audit.Entry{
		{Time: t0, Source: "stone", Outcome: "processed"},
		{Time: t0.Add(time.Second), Source: "stone", Outcome: "replayed"},
		{Time: t0.Add(2 * time.Second), Source: "stripe", Outcome: "processed"},
		{Time: t0.Add(3 * time.Second), Source: "stone", Outcome: "processed"},
	}
	// A Counter reading its entries one by one adds them all: the tally
	// keeps those its filter matches.
	tally := audit.NewTally(audit.Filter{Since: t0.Add(time.Second)})
	for _, e := range entries {
		tally.Add(e)
	}
	for _, c := range tally.Counts() {
		fmt.Println(c.Source, c.Outcome, c.N)
	}
	// Output:
	// stone processed 1
	// stone replayed 1
	// stripe processed 1
}
