package memstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/fakeclock"
	"github.com/idemhook/idemhook/storetest"
)

// Hash bits to keep for tests: collideAll sends every compact key to one
// shard and one index slot (every key but one is in the overflow map),
// collideSome gives four hashes.
const (
	collideAll  = 0
	collideSome = 3
	collideNone = ^uint64(0)
)

func newTestStore(t testing.TB, cfg Config, keep uint64) *Store {
	t.Helper()
	s, err := newStore(cfg, keep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustNew(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformanceWithCollisions runs the conformance suite on stores whose
// keys' hashes collide: the keys are told apart by their bytes.
func TestConformanceWithCollisions(t *testing.T) {
	for _, tt := range []struct {
		name string
		keep uint64
		cfg  Config
	}{
		{"all keys one hash", collideAll, Config{}},
		{"four hashes", collideSome, Config{}},
		{"all keys one hash, small", collideAll, Config{MaxEntries: 4096, Shards: 4}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			cfg := tt.cfg
			cfg.Now = clk.Now
			storetest.Run(t, storetest.Harness{
				New:     func(tb testing.TB) idemhook.Store { return newTestStore(tb, cfg, tt.keep) },
				Advance: clk.Advance,
			})
		})
	}
}

// TestArenaAgainstModel runs random calls, with bodies of every size (so
// that completions are written in place and moved), releases, deletes and
// expiries, on one shard, against a map of what each key must hold, until
// the arena has been compacted many times; it checks the arena's
// accounting as it goes, every record at the end, and that dead space is
// reclaimed.
func TestArenaAgainstModel(t *testing.T) {
	for _, tt := range []struct {
		name string
		keep uint64
	}{{"no collisions", collideNone}, {"four hashes", collideSome}} {
		t.Run(tt.name, func(t *testing.T) {
			clk := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			st := newTestStore(t, Config{Now: clk.Now, Shards: 1}, tt.keep)
			sh := &st.shards[0]
			rng := rand.New(rand.NewPCG(1, 2))
			want := map[string]*idemhook.Record{} // live keys
			deadline := map[string]time.Time{}
			claims := map[string]*idemhook.Record{}
			const keys = 3000
			for i := range 200_000 {
				key := fmt.Sprintf("idem:model:%d", rng.IntN(keys))
				now := clk.Now()
				if d, ok := deadline[key]; ok && !now.Before(d) {
					delete(want, key)
					delete(deadline, key)
					delete(claims, key)
				}
				switch op := rng.IntN(10); {
				case op < 4:
					claim := &idemhook.Record{State: idemhook.StatePending, Token: fmt.Sprintf("tok-%d", i)}
					lease := time.Duration(1+rng.IntN(60)) * time.Second
					got, err := st.Claim(t.Context(), key, claim, lease)
					if err != nil {
						t.Fatal(err)
					}
					if d := storetest.Diff(got, want[key]); d != "" {
						t.Fatalf("op %d: Claim(%q):\n%s", i, key, d)
					}
					if got == nil {
						want[key], claims[key], deadline[key] = claim, claim, now.Add(lease)
					}
				case op < 7:
					claim := claims[key]
					if claim == nil {
						continue
					}
					done := &idemhook.Record{
						State:  idemhook.StateCompleted,
						Status: http.StatusOK,
						Header: http.Header{"Content-Type": {"application/json"}},
						Body:   bytes.Repeat([]byte{'x'}, rng.IntN(200)),
					}
					ttl := time.Duration(1+rng.IntN(120)) * time.Second
					if err := st.Complete(t.Context(), key, claim, done, ttl); err != nil {
						t.Fatalf("op %d: Complete(%q): %v", i, key, err)
					}
					want[key], deadline[key] = done, now.Add(ttl)
					delete(claims, key)
				case op < 8:
					if claim := claims[key]; claim != nil {
						if err := st.Release(t.Context(), key, claim); err != nil {
							t.Fatalf("op %d: Release(%q): %v", i, key, err)
						}
						delete(want, key)
						delete(claims, key)
					}
				case op < 9:
					ok, err := st.Delete(t.Context(), key)
					if err != nil || ok != (want[key] != nil) {
						t.Fatalf("op %d: Delete(%q): %t, %v; want %t", i, key, ok, err, want[key] != nil)
					}
					delete(want, key)
					delete(claims, key)
				default:
					clk.Advance(time.Duration(rng.IntN(500)) * time.Millisecond)
				}
				if i%1000 == 0 {
					checkArena(t, sh)
				}
			}
			for key, rec := range want {
				if !clk.Now().Before(deadline[key]) {
					continue
				}
				got, err := st.Get(t.Context(), key)
				if err != nil {
					t.Fatal(err)
				}
				if d := storetest.Diff(got, rec); d != "" {
					t.Fatalf("Get(%q) at the end:\n%s", key, d)
				}
			}
			checkArena(t, sh)
			a := &sh.arena
			if a.used > 2*a.live+2*maxSegment {
				t.Errorf("arena uses %d bytes for %d live: dead space is not reclaimed", a.used, a.live)
			}
			t.Logf("%d keys held, arena %d bytes used, %d live", sh.len(), a.used, a.live)
		})
	}
}

// checkArena checks the arena's accounting against its segments and the
// index.
func checkArena(t *testing.T, sh *shard) {
	t.Helper()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a := &sh.arena
	used, live := 0, 0
	for i := range a.segs {
		sg := &a.segs[i]
		if sg.buf == nil {
			continue
		}
		segLive := 0
		for off := 0; off < len(sg.buf); {
			slot := slotAt(sg.buf[off:])
			loc := location(uint32(i), off)
			off += len(slot)
			e, klen := entryIn(slot)
			ck := e[entryHeader : entryHeader+klen]
			if sh.holds(sh.hasher.hash(ck), ck, loc) {
				segLive += len(slot)
			}
		}
		if segLive != sg.live {
			t.Fatalf("segment %d: %d live bytes counted, %d indexed", i, sg.live, segLive)
		}
		live += segLive
		if uint32(i) == a.open {
			used += len(sg.buf)
		} else {
			used += cap(sg.buf)
		}
	}
	if live != a.live || used != a.used {
		t.Fatalf("arena: live %d used %d; its segments hold live %d used %d", a.live, a.used, live, used)
	}
	n := 0
	for range sh.all {
		n++
	}
	if n != sh.len() {
		t.Fatalf("all yields %d entries, len is %d", n, sh.len())
	}
}

// TestChurnStaysBounded: keys claimed, completed with answers larger than
// their claims (so each completion leaves a dead slot) and deleted, over
// and over, with a hundred live at a time: the arena reuses its space.
func TestChurnStaysBounded(t *testing.T) {
	st := mustNew(t, Config{Shards: 1})
	sh := &st.shards[0]
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "t"}
	done := &idemhook.Record{State: idemhook.StateCompleted, Status: 200, Body: bytes.Repeat([]byte{'x'}, 100)}
	const live = 100
	peak := 0
	for i := range 200_000 {
		key := fmt.Sprintf("idem:churn:%d", i)
		if _, err := st.Claim(t.Context(), key, claim, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := st.Complete(t.Context(), key, claim, done, time.Hour); err != nil {
			t.Fatal(err)
		}
		if i >= live {
			if ok, err := st.Delete(t.Context(), fmt.Sprintf("idem:churn:%d", i-live)); !ok || err != nil {
				t.Fatalf("Delete: %t, %v", ok, err)
			}
		}
		peak = max(peak, sh.arena.used)
	}
	// 100 keys of about 170 bytes: 17 KB live; 200,000 written.
	if peak > 4*maxSegment {
		t.Fatalf("the arena grew to %d bytes for %d live bytes", peak, sh.arena.live)
	}
	t.Logf("arena peak %d bytes, %d live", peak, sh.arena.live)
}

// TestEntryLargerThanASegment: an answer larger than a segment gets a
// segment of its own, which is freed with it.
func TestEntryLargerThanASegment(t *testing.T) {
	st := mustNew(t, Config{Shards: 1})
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "t"}
	done := &idemhook.Record{State: idemhook.StateCompleted, Status: 200, Body: bytes.Repeat([]byte("0123456789"), maxSegment/5)}
	for _, key := range []string{"idem:big:1", "idem:big:2"} {
		if _, err := st.Claim(t.Context(), key, claim, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := st.Complete(t.Context(), key, claim, done, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"idem:big:1", "idem:big:2"} {
		got, err := st.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if d := storetest.Diff(got, done); d != "" {
			t.Fatalf("Get(%q):\n%s", key, d)
		}
		if ok, err := st.Delete(t.Context(), key); !ok || err != nil {
			t.Fatalf("Delete(%q): %t, %v", key, ok, err)
		}
	}
	sh := &st.shards[0]
	checkArena(t, sh)
	if sh.arena.used > 2*maxSegment+minSegment {
		t.Fatalf("arena holds %d bytes once the large entries are deleted", sh.arena.used)
	}
}
