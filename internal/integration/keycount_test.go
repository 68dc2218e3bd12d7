package integration

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/redisstore"
	"github.com/idemhook/idemhook/sqlitestore"
)

// These flags drive the key-count curve behind docs/benchmarks.md. It
// measures the first-delivery throughput of a store with 0, 1M and 10M keys
// already stored. Each delivery is a Claim then a Complete on a new key,
// from -keys.concurrency goroutines. It also measures the memory a stored
// key takes (the SQLite file's bytes, Redis's used_memory). The run is off
// by default. It needs a few GB of disk and memory and several minutes:
//
//	go test ./internal/integration -run TestKeyCount -count=1 -v -timeout 60m -keys
//
// Redis runs on a private redis-server on a free loopback port. It never
// uses the shared one, because the run fills it with millions of keys.
var (
	keysRun      = flag.Bool("keys", false, "run TestKeyCount (the key-count curve)")
	keysCounts   = flag.String("keys.counts", "0,1000000,10000000", "key-count curve: the numbers of stored keys to measure at, ascending")
	keysDuration = flag.Duration("keys.duration", 3*time.Second, "key-count curve: time of each measurement")
	keysRounds   = flag.Int("keys.rounds", 3, "key-count curve: measurements at each count (the median is reported)")
	keysConc     = flag.Int("keys.concurrency", 32, "key-count curve: concurrent deliveries")
	keysOnly     = flag.String("keys.only", "", "key-count curve: only the stores whose name contains this (SQLite, Redis, Redis compact keys)")
)

// doneRecord is what the middleware stores for a typical small answer on a
// body-hash route.
func doneRecord() *idemhook.Record {
	return &idemhook.Record{
		State:     idemhook.StateCompleted,
		CreatedAt: time.Now(),
		Status:    http.StatusOK,
		Header:    http.Header{"Content-Type": {"application/json"}},
		Body:      []byte(`{"ok":true}`),
	}
}

func randomKey(source string) string {
	var sum [32]byte
	rand.Read(sum[:])
	return idemhook.StoreKey(source, "sha256:"+hex.EncodeToString(sum[:]))
}

// firstDeliveries runs Claim+Complete on new keys from *keysConc goroutines
// for *keysDuration and returns the deliveries per second.
func firstDeliveries(t *testing.T, st idemhook.Store) float64 {
	t.Helper()
	claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
	done := doneRecord()
	var n atomic.Int64
	var failed atomic.Value
	deadline := time.Now().Add(*keysDuration)
	start := time.Now()
	var wg sync.WaitGroup
	for range *keysConc {
		wg.Go(func() {
			ctx := context.Background()
			for time.Now().Before(deadline) {
				key := randomKey("load")
				if existing, err := st.Claim(ctx, key, claim, time.Minute); err != nil || existing != nil {
					failed.Store(fmt.Sprintf("Claim(%q): %v, %v", key, existing, err))
					return
				}
				if err := st.Complete(ctx, key, claim, done, time.Hour); err != nil {
					failed.Store(fmt.Sprintf("Complete(%q): %v", key, err))
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
	return float64(n.Load()) / time.Since(start).Seconds()
}

type curvePoint struct {
	keys    int64
	rates   []float64
	perKey  float64 // bytes per stored key at this count, 0 if unknown
	loadDur time.Duration
}

func TestKeyCount(t *testing.T) {
	if !*keysRun {
		t.Skip("the key-count curve runs with -keys (see docs/benchmarks.md)")
	}
	var counts []int64
	for _, f := range strings.Split(*keysCounts, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n < 0 || (len(counts) > 0 && n < counts[len(counts)-1]) {
			t.Fatalf("-keys.counts: %q is not a list of ascending non-negative integers", *keysCounts)
		}
		counts = append(counts, n)
	}
	done, err := doneRecord().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, GOMAXPROCS=%d, %d concurrent deliveries, %s per measurement, median of %d\n",
		runtime.Version(), runtime.GOMAXPROCS(0), *keysConc, *keysDuration, *keysRounds)
	report := func(name string, pts []curvePoint) {
		fmt.Fprintf(&out, "\n| %s: keys stored | first deliveries/s (median) | all measurements | vs 0 keys | bytes per stored key | time to load |\n|---:|---:|---|---:|---:|---:|\n", name)
		base := 0.0
		for i, p := range pts {
			m := medianFloat(p.rates)
			if i == 0 {
				base = m
			}
			var all []string
			for _, r := range p.rates {
				all = append(all, strconv.FormatFloat(r, 'f', 0, 64))
			}
			per := "-"
			if p.perKey > 0 {
				per = strconv.FormatFloat(p.perKey, 'f', 1, 64)
			}
			fmt.Fprintf(&out, "| %d | %.0f | %s | %.2fx | %s | %s |\n", p.keys, m, strings.Join(all, ", "), m/base, per, p.loadDur.Round(time.Second))
		}
	}

	if strings.Contains("SQLite", *keysOnly) {
		path := filepath.Join(t.TempDir(), "keys.db")
		db, err := sqlitestore.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		// As the gateway opens it: holding the file's lock (pending claims
		// in memory), reading through a pool of its own. No record cache:
		// first deliveries never hit it.
		lock, err := sqlitestore.Lock(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lock.Unlock() })
		reader, err := sqlitestore.OpenReader(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reader.Close() })
		// The store is opened after each load, as a gateway restarted on
		// the file would be: its key filter is built from the file then
		// (the load writes behind the store's back, which the lock would
		// forbid another process). Its INFO line gives the build's time.
		built := make(chan struct{}, 1)
		logger := slog.New(&signalHandler{Handler: slog.NewTextHandler(os.Stderr, nil), prefix: "sqlitestore: key filter built", c: built})
		var st *sqlitestore.Store
		open := func() {
			if st != nil {
				st.Close()
			}
			var err error
			st, err = sqlitestore.New(db, sqlitestore.Config{SweepInterval: -1, Lock: lock, Reader: reader, Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			select { // measure the store as it runs once the filter is built
			case <-built:
			case <-time.After(10 * time.Minute):
				t.Fatal("the key filter was not built within 10 minutes")
			}
		}
		t.Cleanup(func() {
			if st != nil {
				st.Close()
			}
		})
		var pts []curvePoint
		var have int64
		emptySize := fileSize(t, path)
		for _, c := range counts {
			start := time.Now()
			bulkSQLite(t, db, c-have, done)
			have = c
			open()
			p := curvePoint{keys: c, loadDur: time.Since(start)}
			if c > 0 {
				p.perKey = float64(fileSize(t, path)-emptySize) / float64(c)
			}
			for range *keysRounds {
				p.rates = append(p.rates, firstDeliveries(t, st))
			}
			// Remove what the measurements stored, so that the counts stay exact.
			if _, err := db.Exec(`DELETE FROM idem_keys WHERE key >= 'idem:load:' AND key < 'idem:load;'`); err != nil {
				t.Fatal(err)
			}
			if got := countSQLite(t, db); got != c {
				t.Fatalf("SQLite holds %d keys, want %d", got, c)
			}
			pts = append(pts, p)
			t.Logf("SQLite: %d keys: %.0f/s", c, medianFloat(p.rates))
		}
		report("SQLite (file on local disk, WAL, synchronous=NORMAL)", pts)
	}

	for _, compact := range []bool{false, true} {
		name := "Redis"
		if compact {
			name = "Redis compact keys"
		}
		if strings.Contains(name, *keysOnly) {
			report(name+" (private redis-server, same machine)", redisCurve(t, counts, done, compact))
		}
	}
	t.Log(out.String())
}

// redisCurve measures the Redis store on a private server at each count of
// stored keys. With compact, the store and the stored keys use
// Config.CompactKeys. The measurements' own keys (source "load", under the
// prefix "m:" with compact keys, whose keys no longer name their source)
// are deleted after each count, so that the counts stay exact.
func redisCurve(t *testing.T, counts []int64, done []byte, compact bool) []curvePoint {
	srv := redistest.StartServer(t, "--maxmemory", "0")
	opts := &redis.Options{Addr: srv.Addr(), PoolSize: *keysConc * 2, MaxRetries: -1}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	cfg, measured := redisstore.Config{}, "idem:load:" // as the gateway
	if compact {
		cfg.CompactKeys, cfg.Prefix, measured = true, "m:", "m:"
	}
	st, err := redisstore.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bulk, err := redisstore.New(client, redisstore.Config{CompactKeys: compact})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var pts []curvePoint
	var have int64
	base := redistest.UsedMemory(t, client)
	for _, c := range counts {
		start := time.Now()
		bulkRedis(t, client, bulk.Key, c-have, done)
		p := curvePoint{keys: c, loadDur: time.Since(start)}
		if c > 0 {
			p.perKey = float64(redistest.UsedMemory(t, client)-base) / float64(c)
		}
		for range *keysRounds {
			p.rates = append(p.rates, firstDeliveries(t, st))
		}
		deleted, err := redistest.DeletePrefix(ctx, client, measured)
		if err != nil {
			t.Fatal(err)
		}
		have = c
		pts = append(pts, p)
		t.Logf("Redis (compact keys %t): %d keys: %.0f/s (%d measurement keys removed)", compact, c, medianFloat(p.rates), deleted)
	}
	return pts
}

func medianFloat(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// fileSize is the database's size: the file and its WAL.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	var total int64
	for _, p := range []string{path, path + "-wal"} {
		fi, err := os.Stat(p)
		if err == nil {
			total += fi.Size()
		}
	}
	return total
}

// bulkSQLite stores n completed records under random body-hash keys
// ("idem:bulk:sha256:<64 hex>") in one transaction, generated by SQLite
// itself, then checkpoints the WAL so that the file holds them.
func bulkSQLite(t *testing.T, db *sql.DB, n int64, value []byte) {
	t.Helper()
	if n <= 0 {
		return
	}
	exp := time.Now().Add(24 * time.Hour).UnixMilli()
	_, err := db.Exec(`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < ?1)
		INSERT INTO idem_keys (key, value, expires_at)
		SELECT 'idem:bulk:sha256:' || lower(hex(randomblob(32))), ?2, ?3 FROM c`, n, value, exp)
	if err != nil {
		t.Fatalf("bulk insert of %d keys: %v", n, err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
}

func countSQLite(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(`SELECT count(*) FROM idem_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// bulkRedis stores n completed records under random body-hash keys, as
// redisstore does (SET key value PX ttl, under the Redis key redisKey gives
// for the store key), pipelined 10,000 at a time from a few connections.
func bulkRedis(t *testing.T, client *redis.Client, redisKey func(string) string, n int64, value []byte) {
	t.Helper()
	const batch = 10_000
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 4 {
		wg.Go(func() {
			ctx := context.Background()
			for {
				from := next.Add(batch) - batch
				if from >= n {
					return
				}
				pipe := client.Pipeline()
				for range min(batch, n-from) {
					pipe.Set(ctx, redisKey(randomKey("bulk")), value, 24*time.Hour)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("bulk load of %d keys: %v", n, err)
	}
}

// signalHandler is a slog handler that sends on c when a record's message
// starts with prefix.
type signalHandler struct {
	slog.Handler
	prefix string
	c      chan struct{}
}

func (h *signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		select {
		case h.c <- struct{}{}:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}
