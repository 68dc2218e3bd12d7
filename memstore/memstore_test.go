package memstore_test

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/fakeclock"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/storetest"
)

func newClock() *fakeclock.Clock { return fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) }

func newStore(tb testing.TB, cfg memstore.Config) *memstore.Store {
	tb.Helper()
	s, err := memstore.New(cfg)
	if err != nil {
		tb.Fatalf("memstore.New: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func harness(clk *fakeclock.Clock, cfg memstore.Config) storetest.Harness {
	cfg.Now = clk.Now
	return storetest.Harness{
		New:     func(tb testing.TB) idemhook.Store { return newStore(tb, cfg) },
		Advance: clk.Advance,
	}
}

func TestConformance(t *testing.T) {
	tests := []struct {
		name string
		cfg  memstore.Config
	}{
		{"default", memstore.Config{}},
		{"one shard", memstore.Config{Shards: 1}},
		// Small enough that the suite's keys push shards to their bound.
		{"small", memstore.Config{MaxEntries: 4096, Shards: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			storetest.Run(t, harness(newClock(), tt.cfg))
		})
	}
}

func TestConformanceRealClock(t *testing.T) {
	// Without Advance the suite checks expiry with real, short lifetimes.
	storetest.Run(t, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newStore(tb, memstore.Config{}) },
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newStore(tb, memstore.Config{}) },
	})
}

func claimOf(i int) *idemhook.Record {
	return &idemhook.Record{State: idemhook.StatePending, Token: fmt.Sprintf("token-%d", i)}
}

func doneOf(i int) *idemhook.Record {
	return &idemhook.Record{
		State:  idemhook.StateCompleted,
		Status: http.StatusOK,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   fmt.Appendf(nil, `{"n":%d}`, i),
	}
}

func keyOf(i int) string { return fmt.Sprintf("idem:test:%d", i) }

// fill stores a completed record under keyOf(i) for i in [from, to), with
// the TTL ttl(i).
func fill(t *testing.T, st *memstore.Store, from, to int, ttl func(i int) time.Duration) {
	t.Helper()
	for i := from; i < to; i++ {
		if existing, err := st.Claim(t.Context(), keyOf(i), claimOf(i), time.Minute); err != nil || existing != nil {
			t.Fatalf("Claim(%q): got %v, %v; want nil, nil", keyOf(i), existing, err)
		}
		if err := st.Complete(t.Context(), keyOf(i), claimOf(i), doneOf(i), ttl(i)); err != nil {
			t.Fatalf("Complete(%q): %v", keyOf(i), err)
		}
	}
}

func present(t *testing.T, st *memstore.Store, key string) bool {
	t.Helper()
	r, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return r != nil
}

func wantLen(t *testing.T, st *memstore.Store, want int) {
	t.Helper()
	if got := st.Len(); got != want {
		t.Fatalf("Len: got %d, want %d", got, want)
	}
}

func TestMaxEntriesEvictsCompletedClosestToExpiry(t *testing.T) {
	// One shard, sampled whole: an eviction frees max/16 = 16 entries, all
	// among the max/4 = 64 records closest to expiry.
	const max = 256
	clk := newClock()
	st := newStore(t, memstore.Config{Now: clk.Now, MaxEntries: max, Shards: 1})
	// Later keys expire sooner: eviction must follow expiry, not age.
	fill(t, st, 0, max, func(i int) time.Duration { return time.Duration(2*max-i) * time.Minute })
	wantLen(t, st, max)

	if existing, err := st.Claim(t.Context(), keyOf(max), claimOf(max), time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim on a full store: got %v, %v; want nil, nil", existing, err)
	}
	wantLen(t, st, max-16+1)
	evicted := 0
	for i := range max {
		if present(t, st, keyOf(i)) {
			continue
		}
		evicted++
		if i < max-64 {
			t.Errorf("key %d (TTL %d min) was evicted; want only keys among the 64 closest to expiry (%d and up)", i, 2*max-i, max-64)
		}
	}
	if evicted != 16 {
		t.Errorf("%d keys evicted, want 16", evicted)
	}
	if !present(t, st, keyOf(max)) {
		t.Fatal("the new claim is not stored")
	}
}

func TestMaxEntriesDropsExpiredFirst(t *testing.T) {
	const max = 256
	clk := newClock()
	st := newStore(t, memstore.Config{Now: clk.Now, MaxEntries: max, Shards: 1})
	// Even keys live a minute, odd keys a day.
	fill(t, st, 0, max, func(i int) time.Duration {
		if i%2 == 0 {
			return time.Minute
		}
		return 24 * time.Hour
	})
	clk.Advance(2 * time.Minute)
	wantLen(t, st, max) // nothing has met the expired keys yet

	if existing, err := st.Claim(t.Context(), keyOf(max), claimOf(max), time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim on a full store: got %v, %v; want nil, nil", existing, err)
	}
	// Half the shard is expired: it was swept, and no live record evicted.
	wantLen(t, st, max/2+1)
	for i := 1; i < max; i += 2 {
		if !present(t, st, keyOf(i)) {
			t.Fatalf("live key %d was evicted although expired keys could be dropped", i)
		}
	}
}

func TestMaxEntriesNeverEvictsPending(t *testing.T) {
	const max = 8
	clk := newClock()
	st := newStore(t, memstore.Config{Now: clk.Now, MaxEntries: max, Shards: 1})
	for i := range max {
		if _, err := st.Claim(t.Context(), keyOf(i), claimOf(i), time.Hour); err != nil {
			t.Fatalf("Claim %d: %v", i, err)
		}
	}
	_, err := st.Claim(t.Context(), keyOf(max), claimOf(max), time.Hour)
	if !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("Claim on a store full of pending claims: got %v, want ErrFull", err)
	}
	wantLen(t, st, max)
	for i := range max {
		if !present(t, st, keyOf(i)) {
			t.Fatalf("pending claim %d was dropped", i)
		}
	}
	// Claims on keys already held still answer: they store nothing.
	if existing, err := st.Claim(t.Context(), keyOf(0), claimOf(100), time.Hour); err != nil || existing == nil {
		t.Fatalf("Claim on a held key of a full store: got %v, %v; want the claim held", existing, err)
	}

	// Once one claim completes, its record is the one to make room.
	if err := st.Complete(t.Context(), keyOf(3), claimOf(3), doneOf(3), time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if existing, err := st.Claim(t.Context(), keyOf(max), claimOf(max), time.Hour); err != nil || existing != nil {
		t.Fatalf("Claim after a completion: got %v, %v; want nil, nil", existing, err)
	}
	if present(t, st, keyOf(3)) {
		t.Fatal("the completed record was kept and a pending claim dropped instead")
	}
	for _, i := range []int{0, 1, 2, 4, 5, 6, 7, max} {
		if !present(t, st, keyOf(i)) {
			t.Fatalf("pending claim %d was dropped", i)
		}
	}

	// A claim whose lease is over is expired, not pending: it makes room.
	clk.Advance(2 * time.Hour)
	if existing, err := st.Claim(t.Context(), keyOf(max+1), claimOf(max+1), time.Hour); err != nil || existing != nil {
		t.Fatalf("Claim once the leases are over: got %v, %v; want nil, nil", existing, err)
	}
	wantLen(t, st, 1)
}

// TestFullStoreNeverEvictsARunningClaim has goroutines deliver the same
// keys at once on a store that is full from the start, so that most claims
// make room by evicting. A claim may evict completed records (a later copy
// of an evicted key then runs again: the bound is a cache's), but never a
// pending one: no key may ever have two claims running at once. Run it
// with -race.
func TestFullStoreNeverEvictsARunningClaim(t *testing.T) {
	const (
		max       = 512 // 4 shards of 128: an eviction frees 8 entries
		keys      = 2000
		senders   = 8
		keyOffset = 1_000_000 // above the keys of fill
	)
	st := newStore(t, memstore.Config{MaxEntries: max, Shards: 4})
	fill(t, st, 0, max, func(int) time.Duration { return time.Hour })
	var running, won [keys]atomic.Int32
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := range keys {
				k := (i + g*7) % keys // the senders meet on each key at different moments
				key, claim := keyOf(keyOffset+k), claimOf(g*keys+k)
				existing, err := st.Claim(t.Context(), key, claim, time.Minute)
				if err != nil {
					t.Errorf("sender %d, key %d: Claim: %v", g, k, err)
					return
				}
				if existing != nil {
					continue
				}
				// While this claim runs, the other senders claim, evict
				// and complete; no one else may win the key meanwhile,
				// and the claim must still be there to complete.
				won[k].Add(1)
				if n := running[k].Add(1); n != 1 {
					t.Errorf("key %d: %d claims running at once", k, n)
				}
				for range 3 {
					runtime.Gosched()
				}
				running[k].Add(-1)
				if err := st.Complete(t.Context(), key, claim, doneOf(k), time.Hour); err != nil {
					t.Errorf("sender %d, key %d: Complete of a claim it won: %v", g, k, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		if won[k].Load() == 0 {
			t.Fatalf("key %d: no claim won", k)
		}
	}
	if n := st.Len(); n > max {
		t.Fatalf("Len: got %d, want at most %d", n, max)
	}
}

func TestMaxEntriesIsATotalBound(t *testing.T) {
	// 1000 keys over 16 shards of 62: the total stays under MaxEntries even
	// though the keys spread unevenly.
	const max = 1000
	st := newStore(t, memstore.Config{MaxEntries: max, Shards: 16})
	fill(t, st, 0, 5*max, func(int) time.Duration { return time.Hour })
	if n := st.Len(); n > max || n < max*9/10 {
		t.Fatalf("Len after 5000 insertions: got %d, want at most %d and not far below", n, max)
	}
}

func TestExpiredEntriesAreSwept(t *testing.T) {
	clk := newClock()
	st := newStore(t, memstore.Config{Now: clk.Now, Shards: 1})
	fill(t, st, 0, 1000, func(int) time.Duration { return time.Minute })
	wantLen(t, st, 1000)
	clk.Advance(2 * time.Minute)

	// Get meets an expired key and removes it.
	if present(t, st, keyOf(0)) {
		t.Fatal("an expired key is present")
	}
	wantLen(t, st, 999)

	// New writes remove the dead keys: when the shard reaches 1024
	// entries it is swept in full, so only the live keys remain.
	fill(t, st, 1000, 3000, func(int) time.Duration { return time.Hour })
	wantLen(t, st, 2000)
}

func TestExpiredKeysAreAbsent(t *testing.T) {
	clk := newClock()
	st := newStore(t, memstore.Config{Now: clk.Now})
	fill(t, st, 0, 1, func(int) time.Duration { return time.Minute })
	clk.Advance(time.Minute) // expiry is exclusive: at now == deadline it's gone
	if present(t, st, keyOf(0)) {
		t.Fatal("a key is present at the end of its TTL")
	}
}

func TestDeadKeysStayBounded(t *testing.T) {
	// Steady traffic: one new key per second, each living 2000 s, so 2000
	// keys are live once warmed up. Dead keys must not pile up: the shard
	// never holds more than 1.5 times the live keys.
	const live = 2000
	clk := newClock()
	st := newStore(t, memstore.Config{Now: clk.Now, Shards: 1})
	largest := 0
	for i := range 10 * live {
		fill(t, st, i, i+1, func(int) time.Duration { return live * time.Second })
		clk.Advance(time.Second)
		if i >= live {
			largest = max(largest, st.Len())
		}
	}
	if largest > live*3/2 {
		t.Fatalf("the store grew to %d entries for %d live keys; want at most %d", largest, live, live*3/2)
	}
	if largest < live {
		t.Fatalf("the store held at most %d entries for %d live keys", largest, live)
	}
	t.Logf("at most %d entries held for %d live keys", largest, live)
}

func TestFullOfPendingRecovers(t *testing.T) {
	// A shard full of running claims refuses new ones until one of them
	// ends, whichever way it ends.
	const max = 8
	tests := []struct {
		name string
		end  func(t *testing.T, st *memstore.Store, clk *fakeclock.Clock)
	}{
		{"complete", func(t *testing.T, st *memstore.Store, _ *fakeclock.Clock) {
			if err := st.Complete(t.Context(), keyOf(5), claimOf(5), doneOf(5), time.Hour); err != nil {
				t.Fatal(err)
			}
		}},
		{"release", func(t *testing.T, st *memstore.Store, _ *fakeclock.Clock) {
			if err := st.Release(t.Context(), keyOf(5), claimOf(5)); err != nil {
				t.Fatal(err)
			}
		}},
		{"delete", func(t *testing.T, st *memstore.Store, _ *fakeclock.Clock) {
			if ok, err := st.Delete(t.Context(), keyOf(5)); err != nil || !ok {
				t.Fatalf("Delete: %t, %v", ok, err)
			}
		}},
		{"first lease ends", func(t *testing.T, _ *memstore.Store, clk *fakeclock.Clock) {
			clk.Advance(time.Hour + 5*time.Minute) // the lease of claim 5
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			st := newStore(t, memstore.Config{Now: clk.Now, MaxEntries: max, Shards: 1})
			for i := range max {
				// Claim 5 has the shortest lease; the others end later.
				lease := 2 * time.Hour
				if i == 5 {
					lease = time.Hour
				}
				if _, err := st.Claim(t.Context(), keyOf(i), claimOf(i), lease); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				if _, err := st.Claim(t.Context(), keyOf(max), claimOf(max), time.Hour); !errors.Is(err, memstore.ErrFull) {
					t.Fatalf("Claim on a shard full of claims: got %v, want ErrFull", err)
				}
			}
			clk.Advance(time.Minute) // no lease has ended yet
			if _, err := st.Claim(t.Context(), keyOf(max), claimOf(max), time.Hour); !errors.Is(err, memstore.ErrFull) {
				t.Fatalf("Claim before any lease ended: got %v, want ErrFull", err)
			}
			tt.end(t, st, clk)
			if existing, err := st.Claim(t.Context(), keyOf(max), claimOf(max), time.Hour); err != nil || existing != nil {
				t.Fatalf("Claim once a claim ended: got %v, %v; want nil, nil", existing, err)
			}
			for i := range max {
				if i != 5 && !present(t, st, keyOf(i)) {
					t.Fatalf("running claim %d was dropped", i)
				}
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		give memstore.Config
		want string // in the error; "" for none
	}{
		{"zero", memstore.Config{}, ""},
		{"explicit", memstore.Config{MaxEntries: 10, Shards: 8}, ""},
		{"fewer entries than shards", memstore.Config{MaxEntries: 3, Shards: 64}, ""},
		{"negative max", memstore.Config{MaxEntries: -1}, "MaxEntries is -1"},
		{"shards not a power of two", memstore.Config{Shards: 48}, "Shards is 48; want a power of two"},
		{"negative shards", memstore.Config{Shards: -4}, "Shards is -4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := memstore.New(tt.give)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				st.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestFewerEntriesThanShards(t *testing.T) {
	// Shards drop to a power of two under MaxEntries: 3 entries, 2 shards
	// of 1; the store never holds more than 3 keys.
	st := newStore(t, memstore.Config{MaxEntries: 3, Shards: 64})
	stored := 0
	for i := range 20 {
		_, err := st.Claim(t.Context(), keyOf(i), claimOf(i), time.Hour)
		switch {
		case err == nil:
			stored++
		case !errors.Is(err, memstore.ErrFull):
			t.Fatalf("Claim %d: %v", i, err)
		}
	}
	if stored == 0 || st.Len() > 3 || st.Len() != stored {
		t.Fatalf("stored %d claims, Len %d; want 1 to 3, equal", stored, st.Len())
	}
}

func TestRejectsBadArguments(t *testing.T) {
	st := newStore(t, memstore.Config{})
	ctx := t.Context()
	claim := claimOf(1)
	key := keyOf(1)
	if _, err := st.Claim(ctx, key, claim, time.Hour); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"claim nil", func() error { _, err := st.Claim(ctx, keyOf(2), nil, time.Hour); return err }, "want a pending claim, got nil"},
		{"claim completed", func() error { _, err := st.Claim(ctx, keyOf(2), doneOf(2), time.Hour); return err }, "got a record in state completed"},
		{"claim without token", func() error {
			_, err := st.Claim(ctx, keyOf(2), &idemhook.Record{State: idemhook.StatePending}, time.Hour)
			return err
		}, "no owner token"},
		{"claim zero lease", func() error { _, err := st.Claim(ctx, keyOf(2), claimOf(2), 0); return err }, "lease is 0s"},
		{"complete with pending", func() error { return st.Complete(ctx, key, claim, claimOf(1), time.Hour) }, "wants a completed record"},
		{"complete negative ttl", func() error { return st.Complete(ctx, key, claim, doneOf(1), -time.Second) }, "TTL is -1s"},
		{"extend zero lease", func() error { return st.Extend(ctx, key, claim, 0) }, "lease is 0s"},
		{"release nil", func() error { return st.Release(ctx, key, nil) }, "want a pending claim"},
	}
	for _, tt := range tests {
		err := tt.call()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
	// None of them changed anything.
	if got, err := st.Get(ctx, key); err != nil || got == nil || got.Token != claim.Token {
		t.Fatalf("Get after rejected calls: got %v, %v; want the claim", got, err)
	}
	wantLen(t, st, 1)
}

func TestClose(t *testing.T) {
	st := newStore(t, memstore.Config{})
	fill(t, st, 0, 10, func(int) time.Duration { return time.Hour })
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	wantLen(t, st, 0)
	ctx := t.Context()
	calls := map[string]error{}
	_, calls["Claim"] = st.Claim(ctx, keyOf(0), claimOf(0), time.Hour)
	calls["Complete"] = st.Complete(ctx, keyOf(0), claimOf(0), doneOf(0), time.Hour)
	calls["Release"] = st.Release(ctx, keyOf(0), claimOf(0))
	calls["Extend"] = st.Extend(ctx, keyOf(0), claimOf(0), time.Hour)
	_, calls["Get"] = st.Get(ctx, keyOf(0))
	_, calls["Delete"] = st.Delete(ctx, keyOf(0))
	for op, err := range calls {
		if !errors.Is(err, memstore.ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", op, err)
		}
	}
}

func TestOwnershipIsTheToken(t *testing.T) {
	// The owner may pass a copy of its claim whose other fields differ
	// (say a CreatedAt rebuilt from another clock): the token decides.
	st := newStore(t, memstore.Config{})
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "owner", CreatedAt: time.UnixMilli(1_000)}
	if _, err := st.Claim(t.Context(), keyOf(1), claim, time.Hour); err != nil {
		t.Fatal(err)
	}
	copyOfClaim := *claim
	copyOfClaim.CreatedAt = time.UnixMilli(2_000)
	copyOfClaim.Fingerprint[0] = 1
	if err := st.Extend(t.Context(), keyOf(1), &copyOfClaim, time.Hour); err != nil {
		t.Fatalf("Extend with the owner's token: %v", err)
	}
	if err := st.Complete(t.Context(), keyOf(1), &copyOfClaim, doneOf(1), time.Hour); err != nil {
		t.Fatalf("Complete with the owner's token: %v", err)
	}
}

// TestManyKeyPrefixes: keys of more prefixes than the store interns, and of
// prefixes too long to intern, claimed concurrently, all keep their records
// and stay apart.
func TestManyKeyPrefixes(t *testing.T) {
	st := newStore(t, memstore.Config{})
	hash := strings.Repeat("0123456789abcdef", 4)
	var keys []string
	for i := range 400 {
		prefix := fmt.Sprintf("idem:src%d:sha256:", i)
		if i%50 == 0 {
			prefix = strings.Repeat("x", 100) + prefix
		}
		keys = append(keys, prefix+hash, prefix+hash[:63]+"0", prefix+strings.ToUpper(hash))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(keys); i += 4 {
				existing, err := st.Claim(t.Context(), keys[i], claimOf(i), time.Minute)
				if err != nil || existing != nil {
					t.Errorf("Claim(%q): %v, %v; want nil, nil", keys[i], existing, err)
					return
				}
				// Reads from another goroutine's prefixes meanwhile.
				if _, err := st.Get(t.Context(), keys[(i+7)%len(keys)]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, key := range keys {
		if i%2 == 0 {
			if err := st.Complete(t.Context(), key, claimOf(i), doneOf(i), time.Hour); err != nil {
				t.Fatalf("Complete(%q): %v", key, err)
			}
		}
	}
	for i, key := range keys {
		want := claimOf(i)
		if i%2 == 0 {
			want = doneOf(i)
		}
		got, err := st.Get(t.Context(), key)
		if err != nil {
			t.Fatalf("Get(%q): %v", key, err)
		}
		if d := storetest.Diff(got, want); d != "" {
			t.Fatalf("Get(%q):\n%s", key, d)
		}
	}
	wantLen(t, st, len(keys))
	if ok, err := st.Delete(t.Context(), keys[len(keys)-1]); !ok || err != nil {
		t.Errorf("Delete: %t, %v", ok, err)
	}
	if got, err := st.Get(t.Context(), "idem:never:sha256:"+hash); got != nil || err != nil {
		t.Errorf("Get of a key of a prefix never claimed: %v, %v", got, err)
	}
}
