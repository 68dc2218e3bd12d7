package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
)

// The test runs the program as it is, main included: this test binary,
// re-executed with mainEnv set, runs main, on a schema of the test's own
// (the URL's search_path), so its orders and idemhook_keys tables are the
// test's.

const mainEnv = "RECORDORDER_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) != "" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestRecordOrder: a delivery records one order and gets the committed 201;
// its replays are that answer, header by header and byte by byte. During a
// store outage the handler records nothing and answers 503 with
// Retry-After, and the provider's retry afterwards records the order once.
func TestRecordOrder(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgx.Identifier{"recordorder_" + strings.ToLower(rand.Text()[:12])}.Sanitize()
	if _, err := pool.Exec(t.Context(), `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("dropping the test's schema: %v", err)
		}
	})
	dbURL, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := dbURL.Query()
	q.Set("search_path", strings.Trim(schema, `"`))
	dbURL.RawQuery = q.Encode()
	base := start(t, dbURL.String())

	deliver := func(key string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/webhooks/orders", strings.NewReader(`{"sku":"book","qty":1}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	orders := func(key string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.orders WHERE event_id = $1`, idemhook.StoreKey("shop", key)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	first, firstBody := deliver("evt_1")
	if first.StatusCode != http.StatusCreated || first.Header.Get("Cache-Control") != "no-store" ||
		first.Header.Get("Content-Type") != "application/json" || !bytes.HasPrefix(firstBody, []byte(`{"order":`)) {
		t.Fatalf("first delivery: %d %v %q; want the committed 201", first.StatusCode, first.Header, firstBody)
	}
	for range 2 {
		again, body := deliver("evt_1")
		if again.Header.Get(idemhook.ReplayedHeader) != "true" {
			t.Fatalf("re-delivery not replayed: %v", again.Header)
		}
		if got, want := answerHeader(again), answerHeader(first); again.StatusCode != first.StatusCode || !reflect.DeepEqual(got, want) || !bytes.Equal(body, firstBody) {
			t.Fatalf("replay %d %v %q\nfirst  %d %v %q", again.StatusCode, got, body, first.StatusCode, want, firstBody)
		}
	}
	if n := orders("evt_1"); n != 1 {
		t.Fatalf("%d orders for evt_1, want 1", n)
	}

	// An outage of the store: its table is gone for a moment, so the claim
	// fails, the route fails open, and the handler runs without a claim.
	// (A lock would do too, but a claim that timed out waiting for it may
	// still land once the lock goes, and hold the key for its lease.)
	rename := func(from, to string) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), `ALTER TABLE `+schema+`.`+from+` RENAME TO `+to); err != nil {
			t.Fatal(err)
		}
	}
	rename("idemhook_keys", "idemhook_keys_away")
	during, _ := deliver("evt_2")
	rename("idemhook_keys_away", "idemhook_keys")
	if during.StatusCode != http.StatusServiceUnavailable || during.Header.Get("Retry-After") == "" {
		t.Fatalf("during the outage: %d %v; want 503 with Retry-After", during.StatusCode, during.Header)
	}
	if n := orders("evt_2"); n != 0 {
		t.Fatalf("during the outage: %d orders for evt_2, want none", n)
	}
	if retry, _ := deliver("evt_2"); retry.StatusCode != http.StatusCreated || orders("evt_2") != 1 {
		t.Fatalf("the retry after the outage: %d, %d orders; want 201 and 1", retry.StatusCode, orders("evt_2"))
	}
}

// answerHeader is the header of an answer but for what differs between
// the first answer and a replay by design.
func answerHeader(resp *http.Response) http.Header {
	h := resp.Header.Clone()
	h.Del("Date")
	h.Del(idemhook.ReplayedHeader)
	return h
}

// start runs main in a child process on dbURL and returns its base URL once
// it listens.
func start(t *testing.T, dbURL string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainEnv+"=1", "DATABASE_URL="+dbURL, "ADDR=127.0.0.1:0")
	logs, err := cmd.StderrPipe() // log writes there
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			line := sc.Text()
			if _, a, ok := strings.Cut(line, "listening on "); ok {
				addr <- a
			}
			t.Log("recordorder: " + line)
		}
		close(addr)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // it serves until killed
		<-read             // its log, to the end, before Wait closes the pipe
		cmd.Wait()         //nolint:errcheck
	})
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatal("the program exited before listening")
		}
		return "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("the program did not listen within 30s")
	}
	return ""
}
