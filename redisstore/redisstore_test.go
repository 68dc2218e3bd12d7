package redisstore_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/redisstore"
	"github.com/idemhook/idemhook/storetest"
)

// newStore returns a store on the shared server with a fresh random prefix.
// Its keys are deleted when tb ends, so the shared database is left as it
// was without flushing anything.
func newStore(tb testing.TB, client *redis.Client) *redisstore.Store {
	tb.Helper()
	return newStoreWith(tb, client, redisstore.Config{})
}

// newStoreWith is newStore with cfg, whose Prefix it sets. The store is
// closed when tb ends.
func newStoreWith(tb testing.TB, client *redis.Client, cfg redisstore.Config) *redisstore.Store {
	tb.Helper()
	prefix := "test:" + rand.Text() + ":"
	cfg.Prefix = prefix
	st, err := redisstore.New(client, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		st.Close()
		if _, err := redistest.DeletePrefix(context.Background(), client, prefix); err != nil {
			tb.Errorf("deleting the keys of prefix %q: %v", prefix, err)
		}
	})
	return st
}

func TestConformance(t *testing.T) {
	client := redistest.Client(t)
	storetest.Run(t, storetest.Harness{
		New:     func(tb testing.TB) idemhook.Store { return newStore(tb, client) },
		Corrupt: corruptWith(client),
	})
}

// corruptWith is a Harness.Corrupt that stores a value that is no record
// through client, under the store's Redis key.
func corruptWith(client redis.UniversalClient) func(tb testing.TB, st idemhook.Store, key string) {
	return func(tb testing.TB, st idemhook.Store, key string) {
		tb.Helper()
		if err := client.Set(tb.Context(), st.(*redisstore.Store).Key(key), "\x01\x02", time.Hour).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestConformanceCompactKeys runs the suite with Config.CompactKeys: the
// keys change, the contract doesn't.
func TestConformanceCompactKeys(t *testing.T) {
	client := redistest.Client(t)
	storetest.Run(t, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store {
			return newStoreWith(tb, client, redisstore.Config{CompactKeys: true})
		},
	})
}

// privateServerHarness makes stores on servers private to one test, which
// die with it. So no cleanup of keys is needed. A prefix per store still keeps the
// subtests apart.
func privateServerHarness(client redis.UniversalClient) storetest.Harness {
	return storetest.Harness{
		New: func(tb testing.TB) idemhook.Store {
			st, err := redisstore.New(client, redisstore.Config{Prefix: "test:" + rand.Text() + ":"})
			if err != nil {
				tb.Fatal(err)
			}
			return st
		},
		Corrupt: corruptWith(client),
	}
}

func TestConformanceCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { client.Close() })
	storetest.Run(t, privateServerHarness(client))
}

// TestConformanceSentinel runs the suite through a failover client, which
// asks a Sentinel for the master.
func TestConformanceSentinel(t *testing.T) {
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, "idemhook", master.Addr())
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "idemhook",
		SentinelAddrs: []string{sentinel.Addr()},
	})
	t.Cleanup(func() { client.Close() })
	storetest.Run(t, privateServerHarness(client))
}

func BenchmarkStore(b *testing.B) {
	client := redistest.Client(b)
	storetest.Bench(b, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newStore(tb, client) },
	})
}

// BenchmarkMemoryPerKey reports the server memory a completed record of a
// typical small answer takes, on a private server, under the guard's keys
// ("guard") and with Config.CompactKeys ("compact"). used_memory grows by
// this much per stored key. The target is at most 200 bytes per key
// (docs/design.md, Targets).
func BenchmarkMemoryPerKey(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  redisstore.Config
	}{{"guard", redisstore.Config{}}, {"compact", redisstore.Config{CompactKeys: true}}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.StartServer(b)
			client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			b.Cleanup(func() { client.Close() })
			st, err := redisstore.New(client, bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			benchMemoryPerKey(b, client, st)
		})
	}
}

func benchMemoryPerKey(b *testing.B, client *redis.Client, st *redisstore.Store) {
	ctx := b.Context()
	var sum [32]byte
	done := func(claim *idemhook.Record) *idemhook.Record {
		// What the middleware stores for a body-hash route: no
		// fingerprint, the key is the body's hash already.
		return &idemhook.Record{
			State:     idemhook.StateCompleted,
			CreatedAt: time.Now(),
			Status:    200,
			Header:    map[string][]string{"Content-Type": {"application/json"}},
			Body:      []byte(`{"ok":true}`),
		}
	}
	// The key of a body-hash route: "idem:<source>:sha256:<64 hex>".
	store := func() {
		rand.Read(sum[:])
		key := idemhook.StoreKey("stripe", "sha256:"+hex.EncodeToString(sum[:]))
		claim := pendingRecord()
		if _, err := st.Claim(ctx, key, claim, time.Minute); err != nil {
			b.Fatal(err)
		}
		if err := st.Complete(ctx, key, claim, done(claim), 24*time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	store() // scripts cached, connection open
	before := redistest.UsedMemory(b, client)
	n := 0
	for b.Loop() {
		store()
		n++
	}
	b.ReportMetric(float64(redistest.UsedMemory(b, client)-before)/float64(n), "bytes/key")
}

func pendingRecord() *idemhook.Record {
	r := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.UnixMilli(1_700_000_000_000)}
	rand.Read(r.Fingerprint[:])
	return r
}

func completedRecord(claim *idemhook.Record) *idemhook.Record {
	return &idemhook.Record{
		State:       idemhook.StateCompleted,
		Fingerprint: claim.Fingerprint,
		CreatedAt:   time.UnixMilli(1_700_000_001_000),
		Status:      200,
		Body:        []byte(`{"ok":true}`),
	}
}

// TestSetNXGetReply pins down what go-redis returns for SET key v NX GET PX
// ms, which Claim relies on. When the key was absent it returns redis.Nil,
// and the key is now set, with the TTL. Otherwise it returns the old value
// and leaves the key untouched.
func TestSetNXGetReply(t *testing.T) {
	client := redistest.Client(t)
	ctx := t.Context()
	key := "test:" + rand.Text() + ":setnxget"
	t.Cleanup(func() { client.Del(context.Background(), key) })
	args := redis.SetArgs{Mode: "NX", Get: true, TTL: 1500 * time.Millisecond}

	old, err := client.SetArgs(ctx, key, "first", args).Result()
	if !errors.Is(err, redis.Nil) || old != "" {
		t.Fatalf("SET NX GET on an absent key: got (%q, %v), want (\"\", redis.Nil)", old, err)
	}
	if got, err := client.Get(ctx, key).Result(); err != nil || got != "first" {
		t.Fatalf("after SET NX GET on an absent key: GET = (%q, %v), want (\"first\", nil)", got, err)
	}
	if ttl, err := client.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > 1500*time.Millisecond {
		t.Fatalf("after SET NX GET PX 1500: PTTL = (%v, %v), want within (0, 1.5s]", ttl, err)
	}

	old, err = client.SetArgs(ctx, key, "second", args).Result()
	if err != nil || old != "first" {
		t.Fatalf("SET NX GET on a present key: got (%q, %v), want (\"first\", nil)", old, err)
	}
	if got, err := client.Get(ctx, key).Result(); err != nil || got != "first" {
		t.Fatalf("after SET NX GET on a present key: GET = (%q, %v), want the old value \"first\"", got, err)
	}
}

// TestKeys checks where records land in Redis. By default they land under
// the middleware's key unchanged (the NestJS guard's keys). With a prefix
// they land under Prefix+key.
func TestKeys(t *testing.T) {
	client := redistest.Client(t)
	random := rand.Text()
	// The compact key, as Config.CompactKeys documents it.
	compact := func(key string) string {
		sum := sha256.Sum256([]byte(key))
		return "i:" + base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	tests := []struct {
		name    string
		prefix  string
		compact bool
		key     string
		wantKey string
	}{
		{"NoPrefix", "", false, "idem:stripe:evt_" + random, "idem:stripe:evt_" + random},
		{"Prefix", "test:" + random + ":", false, "idem:stripe:evt_1", "test:" + random + ":idem:stripe:evt_1"},
		{"CompactKeys", "test:" + random + ":", true, "idem:stripe:evt_1", "test:" + random + ":" + compact("idem:stripe:evt_1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			t.Cleanup(func() { client.Del(context.Background(), tt.wantKey) })
			st, err := redisstore.New(client, redisstore.Config{Prefix: tt.prefix, CompactKeys: tt.compact})
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Key(tt.key); got != tt.wantKey {
				t.Errorf("Key(%q) = %q, want %q", tt.key, got, tt.wantKey)
			}
			claim := pendingRecord()
			if _, err := st.Claim(ctx, tt.key, claim, time.Minute); err != nil {
				t.Fatal(err)
			}
			raw, err := client.Get(ctx, tt.wantKey).Bytes()
			if err != nil {
				t.Fatalf("GET %s after Claim: %v", tt.wantKey, err)
			}
			want, _ := claim.MarshalBinary()
			if string(raw) != string(want) {
				t.Errorf("GET %s = %x, want the encoded claim %x", tt.wantKey, raw, want)
			}
		})
	}
}

// TestLifetimes checks the expiry Redis holds after each step, with bounds
// only and no timing. It is the lease after Claim and Extend, and the TTL
// after Complete.
func TestLifetimes(t *testing.T) {
	client := redistest.Client(t)
	st := newStore(t, client)
	ctx := t.Context()
	key := "idem:test:lifetimes"
	pttl := func() time.Duration {
		t.Helper()
		d, err := client.PTTL(ctx, st.Key(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	claim := pendingRecord()
	if _, err := st.Claim(ctx, key, claim, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d <= 0 || d > 30*time.Second {
		t.Fatalf("PTTL after Claim with a 30s lease = %v, want within (0, 30s]", d)
	}
	if err := st.Extend(ctx, key, claim, time.Hour); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d <= 30*time.Second || d > time.Hour {
		t.Fatalf("PTTL after Extend to 1h = %v, want within (30s, 1h]", d)
	}
	if err := st.Complete(ctx, key, claim, completedRecord(claim), 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d <= time.Hour || d > 24*time.Hour {
		t.Fatalf("PTTL after Complete with a 24h TTL = %v, want within (1h, 24h]", d)
	}
	// A lease below a millisecond is rounded up, never sent as 0.
	key2, claim2 := "idem:test:submilli", pendingRecord()
	if _, err := st.Claim(ctx, key2, claim2, time.Microsecond); err != nil {
		t.Fatalf("Claim with a 1µs lease: %v", err)
	}
}

// TestCorruptValue checks that a value that isn't a Record is reported as
// ErrCorruptRecord by Claim and Get, and that Claim leaves it in place.
func TestCorruptValue(t *testing.T) {
	client := redistest.Client(t)
	st := newStore(t, client)
	ctx := t.Context()
	tests := []struct {
		name  string
		value string
	}{
		{"GuardJSON", `{"statusCode":200,"body":{"ok":true}}`},
		{"Empty", ""},
		{"Truncated", "\x01\x02"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "idem:test:corrupt-" + tt.name
			if err := client.Set(ctx, st.Key(key), tt.value, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			existing, err := st.Claim(ctx, key, pendingRecord(), time.Minute)
			if !errors.Is(err, idemhook.ErrCorruptRecord) || existing != nil {
				t.Fatalf("Claim over %q: got (%v, %v), want (nil, ErrCorruptRecord)", tt.value, existing, err)
			}
			if want := "redisstore: claim " + st.Key(key) + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Claim error %q does not start with %q", err, want)
			}
			if got, err := client.Get(ctx, st.Key(key)).Result(); err != nil || got != tt.value {
				t.Errorf("after Claim over a corrupt value: GET = (%q, %v), want it unchanged", got, err)
			}
			if _, err := st.Get(ctx, key); !errors.Is(err, idemhook.ErrCorruptRecord) {
				t.Errorf("Get of a corrupt value: got %v, want ErrCorruptRecord", err)
			}
		})
	}
}

// TestErrors checks errors that don't need a server.
func TestErrors(t *testing.T) {
	if _, err := redisstore.New(nil, redisstore.Config{}); err == nil {
		t.Fatal("New(nil client): got no error")
	}
	// The client points nowhere: each call below must fail before sending.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { client.Close() })
	st, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	claim := pendingRecord()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"ClaimZeroLease", func() error { _, err := st.Claim(ctx, "idem:a:b", claim, 0); return err }(),
			"redisstore: claim idem:a:b: lease must be positive, got 0s"},
		{"ExtendNegativeLease", st.Extend(ctx, "idem:a:b", claim, -time.Second),
			"redisstore: extend idem:a:b: lease must be positive, got -1s"},
		{"CompleteZeroTTL", st.Complete(ctx, "idem:a:b", claim, completedRecord(claim), 0),
			"redisstore: complete idem:a:b: ttl must be positive, got 0s"},
		{"ReleaseInvalidRecord", st.Release(ctx, "idem:a:b", &idemhook.Record{}),
			"redisstore: release idem:a:b: idemhook: cannot encode record in State(0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || tt.err.Error() != tt.want {
				t.Errorf("got error %v, want %q", tt.err, tt.want)
			}
		})
	}
}

// TestNotOwnerError checks that a lost claim is reported as ErrNotOwner with
// the step and key in the message.
func TestNotOwnerError(t *testing.T) {
	client := redistest.Client(t)
	st := newStore(t, client)
	err := st.Complete(t.Context(), "idem:test:nobody", pendingRecord(), completedRecord(pendingRecord()), time.Hour)
	if !errors.Is(err, idemhook.ErrNotOwner) {
		t.Fatalf("Complete of a missing key: got %v, want ErrNotOwner", err)
	}
	if want := "redisstore: complete " + st.Key("idem:test:nobody") + ": idemhook: claim not held"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

// TestServerRestart kills the server under a store. Calls fail with a
// wrapped connection error. After a restart (an empty server with no cached
// scripts) every step works again, the scripts through the EVAL fallback.
func TestServerRestart(t *testing.T) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			testServerRestart(t, srv, kind.store(t, srv.Addr()))
		})
	}
}

func testServerRestart(t *testing.T, srv *redistest.Server, st *redisstore.Store) {
	ctx := t.Context()
	cycle := func(key string) {
		t.Helper()
		claim := pendingRecord()
		if existing, err := st.Claim(ctx, key, claim, time.Minute); err != nil || existing != nil {
			t.Fatalf("Claim(%q) = (%v, %v), want (nil, nil)", key, existing, err)
		}
		if err := st.Extend(ctx, key, claim, time.Minute); err != nil {
			t.Fatalf("Extend(%q): %v", key, err)
		}
		if err := st.Complete(ctx, key, claim, completedRecord(claim), time.Minute); err != nil {
			t.Fatalf("Complete(%q): %v", key, err)
		}
		got, err := st.Get(ctx, key)
		if err != nil || got == nil || got.State != idemhook.StateCompleted {
			t.Fatalf("Get(%q) = (%v, %v), want the completed record", key, got, err)
		}
	}
	cycle("idem:test:before")

	srv.Kill()
	_, err := st.Claim(ctx, "idem:test:down", pendingRecord(), time.Minute)
	if err == nil || !strings.HasPrefix(err.Error(), "redisstore: claim idem:test:down: ") {
		t.Fatalf("Claim with the server down: got %v, want an error starting with \"redisstore: claim idem:test:down: \"", err)
	}
	if _, err := st.Get(ctx, "idem:test:before"); err == nil {
		t.Fatal("Get with the server down: got no error")
	}

	srv.Restart(t)
	if got, err := st.Get(ctx, "idem:test:before"); err != nil || got != nil {
		t.Fatalf("Get after restarting an empty server = (%v, %v), want (nil, nil)", got, err)
	}
	cycle("idem:test:after")
}

// monitor reads a MONITOR stream of a server on a raw connection.
type monitor struct {
	conn net.Conn
	r    *bufio.Reader
	n    int
}

func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	m := &monitor{conn: conn, r: bufio.NewReader(conn)}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line := m.line(t); line != "+OK" {
		t.Fatalf("MONITOR answered %q", line)
	}
	return m
}

func (m *monitor) line(t *testing.T) string {
	t.Helper()
	_ = m.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := m.r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading MONITOR: %v", err)
	}
	return strings.TrimRight(line, "\r\n")
}

// sent returns the names of the commands clients sent since the previous
// call, in order, leaving out those run inside scripts and the PINGs a
// client sends on its own to check an idle connection (rueidis does). It has admin send an
// ECHO marker and reads the stream up to it, so nothing sent before the
// call is missed.
func (m *monitor) sent(t *testing.T, admin *redis.Client) []string {
	t.Helper()
	var names []string
	for _, c := range m.sentFrom(t, admin) {
		names = append(names, c.name)
	}
	return names
}

// sentCommand is a command MONITOR showed: its name, and the client
// connection that sent it ("127.0.0.1:40000").
type sentCommand struct{ name, from string }

// sentFrom is sent with the connection each command came from.
func (m *monitor) sentFrom(t *testing.T, admin *redis.Client) []sentCommand {
	t.Helper()
	m.n++
	marker := "marker-" + strconv.Itoa(m.n)
	if err := admin.Echo(t.Context(), marker).Err(); err != nil {
		t.Fatal(err)
	}
	var cmds []sentCommand
	for {
		// +1700000000.123456 [0 127.0.0.1:40000] "set" "key" ...
		// +1700000000.123457 [0 lua] "GET" "key"
		line := m.line(t)
		_, rest, ok := strings.Cut(line, " [")
		source, args, ok2 := strings.Cut(rest, "] ")
		if !ok || !ok2 || !strings.HasPrefix(args, `"`) {
			t.Fatalf("unexpected MONITOR line %q", line)
		}
		if strings.HasSuffix(source, " lua") {
			continue
		}
		name, _, _ := strings.Cut(args[1:], `"`)
		name = strings.ToLower(name)
		_, from, _ := strings.Cut(source, " ")
		switch {
		case name == "echo" && strings.Contains(args, `"`+marker+`"`):
			return cmds
		case name != "ping":
			cmds = append(cmds, sentCommand{name, from})
		}
	}
}

// TestCommandCounts lists the commands each step sends, read from MONITOR
// on a private server so that nothing else shows up. The targets in
// docs/design.md (Targets) are 1 command for a duplicate and 2 for a first
// delivery. INFO commandstats can't tell, because it also counts the
// commands a script runs.
func TestCommandCounts(t *testing.T) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			// Both clients connect (and their handshakes are sent) before
			// any measurement.
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1})
			t.Cleanup(func() { admin.Close() })
			if err := admin.Ping(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			testCommandCounts(t, srv, admin, kind.store(t, srv.Addr()))
		})
	}
}

func testCommandCounts(t *testing.T, srv *redistest.Server, admin *redis.Client, st *redisstore.Store) {
	ctx := t.Context()
	claims := map[string]*idemhook.Record{}
	claim := func(t *testing.T, key string) {
		t.Helper()
		c := pendingRecord()
		claims[key] = c
		if existing, err := st.Claim(ctx, key, c, time.Minute); err != nil || existing != nil {
			t.Fatalf("Claim(%q) = (%v, %v), want (nil, nil)", key, existing, err)
		}
	}
	complete := func(t *testing.T, key string) {
		t.Helper()
		if err := st.Complete(ctx, key, claims[key], completedRecord(claims[key]), time.Hour); err != nil {
			t.Fatalf("Complete(%q): %v", key, err)
		}
	}

	// warm loads the three scripts, so that a measured EVALSHA finds its
	// script cached.
	warm := func(t *testing.T) {
		t.Helper()
		for _, k := range []string{"idem:test:warm1", "idem:test:warm2"} {
			claim(t, k)
			if err := st.Extend(ctx, k, claims[k], time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Release(ctx, "idem:test:warm1", claims["idem:test:warm1"]); err != nil {
			t.Fatal(err)
		}
		complete(t, "idem:test:warm2")
	}
	// Each case sets up what it needs in prep. Only run is measured.
	tests := []struct {
		name string
		prep func(t *testing.T)
		run  func(t *testing.T)
		want []string
	}{
		{
			// EVALSHA answers NOSCRIPT once per script and server, and again
			// after a restart or SCRIPT FLUSH. The client then sends EVAL,
			// which caches the script.
			name: "FirstDeliveryColdScriptCache",
			prep: func(t *testing.T) {
				if err := admin.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			},
			run:  func(t *testing.T) { claim(t, "idem:test:cold"); complete(t, "idem:test:cold") },
			want: []string{"set", "evalsha", "eval"},
		},
		{
			name: "FirstDelivery",
			prep: warm,
			run:  func(t *testing.T) { claim(t, "idem:test:first"); complete(t, "idem:test:first") },
			want: []string{"set", "evalsha"},
		},
		{
			name: "Duplicate",
			prep: func(t *testing.T) { claim(t, "idem:test:dup"); complete(t, "idem:test:dup") },
			run: func(t *testing.T) {
				got, err := st.Claim(ctx, "idem:test:dup", pendingRecord(), time.Minute)
				if err != nil || got == nil || got.State != idemhook.StateCompleted {
					t.Fatalf("Claim of a completed key = (%v, %v), want the completed record", got, err)
				}
			},
			want: []string{"set"},
		},
		{
			name: "DuplicateInFlight",
			prep: func(t *testing.T) { claim(t, "idem:test:inflight") },
			run: func(t *testing.T) {
				got, err := st.Claim(ctx, "idem:test:inflight", pendingRecord(), time.Minute)
				if err != nil || got == nil || got.State != idemhook.StatePending {
					t.Fatalf("Claim of a pending key = (%v, %v), want the pending record", got, err)
				}
			},
			want: []string{"set"},
		},
		{
			name: "Extend",
			prep: func(t *testing.T) { warm(t); claim(t, "idem:test:extend") },
			run: func(t *testing.T) {
				if err := st.Extend(ctx, "idem:test:extend", claims["idem:test:extend"], time.Minute); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"evalsha"},
		},
		{
			name: "Release",
			prep: func(t *testing.T) { warm(t); claim(t, "idem:test:release") },
			run: func(t *testing.T) {
				if err := st.Release(ctx, "idem:test:release", claims["idem:test:release"]); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"evalsha"},
		},
		{
			name: "ReleaseNotOwner",
			prep: func(t *testing.T) { warm(t); claim(t, "idem:test:notowner") },
			run: func(t *testing.T) {
				err := st.Release(ctx, "idem:test:notowner", pendingRecord())
				if !errors.Is(err, idemhook.ErrNotOwner) {
					t.Fatalf("Release with another token: got %v, want ErrNotOwner", err)
				}
			},
			want: []string{"evalsha"},
		},
		{
			name: "Get",
			prep: func(t *testing.T) { claim(t, "idem:test:get") },
			run: func(t *testing.T) {
				if got, err := st.Get(ctx, "idem:test:get"); err != nil || got == nil {
					t.Fatalf("Get = (%v, %v), want the claim", got, err)
				}
			},
			want: []string{"get"},
		},
		{
			name: "Delete",
			prep: func(t *testing.T) { claim(t, "idem:test:delete") },
			run: func(t *testing.T) {
				if ok, err := st.Delete(ctx, "idem:test:delete"); err != nil || !ok {
					t.Fatalf("Delete = (%v, %v), want (true, nil)", ok, err)
				}
			},
			want: []string{"del"},
		},
	}
	mon := startMonitor(t, srv.Addr())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := admin.FlushDB(ctx).Err(); err != nil { // a private server
				t.Fatal(err)
			}
			clear(claims)
			tt.prep(t)
			mon.sent(t, admin)
			tt.run(t)
			if got := mon.sent(t, admin); !slices.Equal(got, tt.want) {
				t.Errorf("commands sent: got %q, want %q", got, tt.want)
			}
		})
	}
}
