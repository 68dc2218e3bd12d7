package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/fakeclock"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/storetest"
)

// The suite is tested the way it tests stores: a correct store passes it,
// and each store broken in one known way fails it in the subtest meant to
// catch that bug. Broken stores run in a child process (a failing suite
// fails its test), re-executing this test binary with mutantEnv set.

const mutantEnv = "STORETEST_MUTANT"

func memHarness(wrap func(idemhook.Store) idemhook.Store) storetest.Harness {
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return storetest.Harness{
		New: func(tb testing.TB) idemhook.Store {
			st, err := memstore.New(memstore.Config{Now: clk.Now})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { st.Close() })
			return wrap(st)
		},
		Advance: clk.Advance,
	}
}

// broken wraps a correct store. Its nil fields call through.
type broken struct {
	idemhook.Store
	claim   func(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error)
	release func(ctx context.Context, key string, claim *idemhook.Record) error
	extend  func(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) error
	get     func(ctx context.Context, key string) (*idemhook.Record, error)
	delete  func(ctx context.Context, key string) (bool, error)
	ttl     func(time.Duration) time.Duration
}

func (b *broken) Claim(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error) {
	if b.claim != nil {
		return b.claim(ctx, key, claim, lease)
	}
	return b.Store.Claim(ctx, key, claim, lease)
}

func (b *broken) Complete(ctx context.Context, key string, claim, done *idemhook.Record, ttl time.Duration) error {
	if b.ttl != nil {
		ttl = b.ttl(ttl)
	}
	return b.Store.Complete(ctx, key, claim, done, ttl)
}

func (b *broken) Release(ctx context.Context, key string, claim *idemhook.Record) error {
	if b.release != nil {
		return b.release(ctx, key, claim)
	}
	return b.Store.Release(ctx, key, claim)
}

func (b *broken) Extend(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) error {
	if b.extend != nil {
		return b.extend(ctx, key, claim, lease)
	}
	return b.Store.Extend(ctx, key, claim, lease)
}

func (b *broken) Get(ctx context.Context, key string) (*idemhook.Record, error) {
	if b.get != nil {
		return b.get(ctx, key)
	}
	return b.Store.Get(ctx, key)
}

func (b *broken) Delete(ctx context.Context, key string) (bool, error) {
	if b.delete != nil {
		return b.delete(ctx, key)
	}
	return b.Store.Delete(ctx, key)
}

// mutants are stores broken in one way each, with the subtest that must
// catch it.
// Each mutant names the subtests meant to catch it. It must fail in at least
// one. A race (check-then-set) shows in whichever concurrent subtest the
// scheduler happens to interleave, so it lists both.
var mutants = map[string]struct {
	wantFail []string
	wrap     func(st idemhook.Store) idemhook.Store
}{
	"check-then-set claim": {[]string{"Claim/Concurrent", "Expiry/ConcurrentClaimAfterLease"}, func(st idemhook.Store) idemhook.Store {
		b := &broken{Store: st}
		b.claim = func(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error) {
			if r, err := st.Get(ctx, key); r != nil || err != nil {
				return r, err
			}
			// The round trip between the check and the set, as a
			// networked store has: the other racers check meanwhile.
			time.Sleep(time.Millisecond)
			st.Delete(ctx, key)
			return st.Claim(ctx, key, claim, lease)
		}
		return b
	}},
	"release without owner check": {[]string{"Release/OtherToken"}, func(st idemhook.Store) idemhook.Store {
		b := &broken{Store: st}
		b.release = func(ctx context.Context, key string, _ *idemhook.Record) error {
			_, err := st.Delete(ctx, key)
			return err
		}
		return b
	}},
	"extend that does nothing": {[]string{"Expiry/ExtendRenews"}, func(st idemhook.Store) idemhook.Store {
		b := &broken{Store: st}
		b.extend = func(ctx context.Context, key string, claim *idemhook.Record, _ time.Duration) error {
			r, err := st.Get(ctx, key)
			if err != nil || r == nil || r.Token != claim.Token {
				return idemhook.ErrNotOwner
			}
			return nil
		}
		return b
	}},
	"context ignored": {[]string{"CanceledContext"}, func(st idemhook.Store) idemhook.Store {
		b := &broken{Store: st}
		b.get = func(_ context.Context, key string) (*idemhook.Record, error) {
			return st.Get(context.Background(), key)
		}
		return b
	}},
	"Get hands out shared records": {[]string{"Get/ReturnsCopy"}, func(st idemhook.Store) idemhook.Store {
		var mu sync.Mutex
		cache := map[string]*idemhook.Record{}
		b := &broken{Store: st}
		b.get = func(ctx context.Context, key string) (*idemhook.Record, error) {
			r, err := st.Get(ctx, key)
			if r == nil || err != nil || r.State != idemhook.StateCompleted {
				return r, err
			}
			mu.Lock()
			defer mu.Unlock()
			if c, ok := cache[key]; ok {
				return c, nil
			}
			cache[key] = r
			return r, nil
		}
		return b
	}},
	"Delete always reports true": {[]string{"Delete"}, func(st idemhook.Store) idemhook.Store {
		b := &broken{Store: st}
		b.delete = func(ctx context.Context, key string) (bool, error) {
			_, err := st.Delete(ctx, key)
			return true, err
		}
		return b
	}},
	"TTL ignored": {[]string{"Expiry/TTL"}, func(st idemhook.Store) idemhook.Store {
		return &broken{Store: st, ttl: func(time.Duration) time.Duration { return 1000 * time.Hour }}
	}},
	"Get loses multi-valued headers": {[]string{"Complete/Owner"}, func(st idemhook.Store) idemhook.Store {
		b := &broken{Store: st}
		b.get = func(ctx context.Context, key string) (*idemhook.Record, error) {
			r, err := st.Get(ctx, key)
			if r != nil {
				for k, vs := range r.Header {
					r.Header[k] = vs[:1]
				}
			}
			return r, err
		}
		return b
	}},
}

func TestMemstorePasses(t *testing.T) {
	storetest.Run(t, memHarness(func(st idemhook.Store) idemhook.Store { return st }))
}

// TestLoopBatchPasses runs the suite, its batch subtests included, on
// memstore behind loopBatch: batches made of single calls.
func TestLoopBatchPasses(t *testing.T) {
	storetest.Run(t, memHarness(func(st idemhook.Store) idemhook.Store { return &loopBatch{Store: st} }))
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	if testing.Short() {
		t.Skip("re-runs the suite in child processes")
	}
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMutant$", "-test.v")
			cmd.Env = append(os.Environ(), mutantEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store broken by %q; output:\n%s", name, out)
			}
			caught := slices.ContainsFunc(m.wantFail, func(sub string) bool {
				return strings.Contains(string(out), "--- FAIL: TestMutant/"+sub+" ")
			})
			if !caught {
				t.Fatalf("the suite failed a store broken by %q, but not in subtest %s; output:\n%s", name, strings.Join(m.wantFail, " or "), out)
			}
		})
	}
}

// TestMutant runs the suite on one broken store, in the child process of
// TestSuiteCatchesBrokenStores.
func TestMutant(t *testing.T) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("runs only in the child processes of TestSuiteCatchesBrokenStores")
	}
	m, ok := mutants[name]
	if !ok {
		t.Fatalf("unknown mutant %q", name)
	}
	storetest.Run(t, memHarness(m.wrap))
}
