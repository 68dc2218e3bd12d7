package memstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

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
