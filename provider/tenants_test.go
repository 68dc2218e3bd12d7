package provider_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/provider"
)

// tenantServer is a real HTTP server with one Stripe route for the tenants
// acme and globex on POST /webhooks/stripe/{tenant}, each with its own
// secret. It counts the handler's runs per tenant and records every
// delivery's outcome and store key.
type tenantServer struct {
	url   string
	store idemhook.Store
	runs  map[string]*atomic.Int64
	mu    sync.Mutex
	infos []idemhook.DeliveryInfo
}

var tenantSecrets = map[string]string{"acme": "whsec_acme", "globex": "whsec_globex"}

func newTenantServer(t *testing.T) *tenantServer {
	t.Helper()
	ts := &tenantServer{runs: map[string]*atomic.Int64{}}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts.store = store
	mw, err := idemhook.New(store, idemhook.Options{OnDelivery: func(d idemhook.DeliveryInfo) {
		ts.mu.Lock()
		ts.infos = append(ts.infos, d)
		ts.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	presets := map[string]*idemhook.Preset{}
	for name, secret := range tenantSecrets {
		p, err := provider.New("stripe", provider.Config{Secrets: []string{secret}})
		if err != nil {
			t.Fatal(err)
		}
		presets[name] = p
		ts.runs[name] = new(atomic.Int64)
	}
	tenants, err := provider.NewTenants("", presets)
	if err != nil {
		t.Fatal(err)
	}
	route, err := mw.Route(tenants.Route(idemhook.Route{Source: "stripe"}))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stripe/{tenant}", route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.runs[r.PathValue("tenant")].Add(1)
		io.WriteString(w, "ok "+r.PathValue("tenant"))
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ts.url = srv.URL
	return ts
}

// deliver posts a Stripe event to tenant's path, signed now with secret.
func (ts *tenantServer) deliver(t *testing.T, tenant, event, secret string) (int, bool) {
	t.Helper()
	body := `{"id":"` + event + `","object":"event","type":"invoice.paid"}`
	req, err := http.NewRequest(http.MethodPost, ts.url+"/webhooks/stripe/"+tenant, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	stamp := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Stripe-Signature", "t="+stamp+",v1="+hmacHex(secret, stamp, ".", body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(idemhook.ReplayedHeader) == "true"
}

func (ts *tenantServer) last() idemhook.DeliveryInfo {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.infos[len(ts.infos)-1]
}

func (ts *tenantServer) stored(t *testing.T, key string) bool {
	t.Helper()
	rec, err := ts.store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return rec != nil
}

// One route, two tenants with their own secrets: each tenant's deliveries
// pass with its secret only, its re-deliveries are replayed, its keys are
// idem:stripe@<tenant>:<event id>, and one event id of two tenants is two
// events. A delivery forged with the other tenant's secret, or for a tenant
// the route doesn't know, is answered 401 with nothing claimed.
func TestTenantsOneRouteSecretPerTenant(t *testing.T) {
	ts := newTenantServer(t)

	if code, replayed := ts.deliver(t, "acme", "evt_1", "whsec_acme"); code != 200 || replayed {
		t.Fatalf("acme evt_1: %d replayed=%v, want 200 processed", code, replayed)
	}
	if d := ts.last(); d.StoreKey != "idem:stripe@acme:evt_1" || d.Scope != "acme" {
		t.Fatalf("store key %q scope %q, want idem:stripe@acme:evt_1 and acme", d.StoreKey, d.Scope)
	}
	if code, replayed := ts.deliver(t, "acme", "evt_1", "whsec_acme"); code != 200 || !replayed {
		t.Fatalf("acme evt_1 re-delivered: %d replayed=%v, want a 200 replay", code, replayed)
	}
	// The same event id for globex is globex's own event.
	if code, replayed := ts.deliver(t, "globex", "evt_1", "whsec_globex"); code != 200 || replayed {
		t.Fatalf("globex evt_1: %d replayed=%v, want 200 processed", code, replayed)
	}
	if d := ts.last(); d.StoreKey != "idem:stripe@globex:evt_1" {
		t.Fatalf("store key %q, want idem:stripe@globex:evt_1", d.StoreKey)
	}

	// Forged: globex's path, acme's secret. Then the real one runs.
	if code, _ := ts.deliver(t, "globex", "evt_2", "whsec_acme"); code != 401 {
		t.Fatalf("globex evt_2 signed with acme's secret: %d, want 401", code)
	}
	if d := ts.last(); d.Outcome != idemhook.OutcomeSignatureInvalid || d.StoreKey != "" {
		t.Fatalf("forged delivery: outcome %s store key %q, want signature_invalid and none", d.Outcome, d.StoreKey)
	}
	if ts.stored(t, "idem:stripe@globex:evt_2") || ts.stored(t, "idem:stripe@acme:evt_2") {
		t.Fatal("the forged delivery claimed a key")
	}
	if code, replayed := ts.deliver(t, "globex", "evt_2", "whsec_globex"); code != 200 || replayed {
		t.Fatalf("globex evt_2 with its own secret after the forgery: %d replayed=%v, want 200 processed", code, replayed)
	}

	// A tenant the route doesn't know, whatever the secret.
	for _, secret := range []string{"whsec_acme", "whsec_globex"} {
		if code, _ := ts.deliver(t, "initech", "evt_3", secret); code != 401 {
			t.Fatalf("unknown tenant: %d, want 401", code)
		}
		d := ts.last()
		if d.Outcome != idemhook.OutcomeSignatureInvalid || !errors.Is(d.Err, provider.ErrUnknownTenant) || d.StoreKey != "" {
			t.Fatalf("unknown tenant: outcome %s err %v store key %q, want signature_invalid, unknown tenant, no key", d.Outcome, d.Err, d.StoreKey)
		}
	}
	if ts.stored(t, "idem:stripe@initech:evt_3") {
		t.Fatal("a delivery for an unknown tenant claimed a key")
	}

	if a, g := ts.runs["acme"].Load(), ts.runs["globex"].Load(); a != 1 || g != 2 {
		t.Fatalf("handler ran %d times for acme and %d for globex, want 1 and 2", a, g)
	}
}

// On a pattern without the wildcard, every delivery is refused, with a
// reason that says why.
func TestTenantsPatternWithoutWildcard(t *testing.T) {
	p, err := provider.New("stripe", provider.Config{Secrets: []string{"whsec_acme"}})
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := provider.NewTenants("", map[string]*idemhook.Preset{"acme": p})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/webhooks/stripe/acme", nil)
	err = tenants.Preset().Verify(r, []byte(`{}`))
	if !errors.Is(err, provider.ErrUnknownTenant) || !strings.Contains(err.Error(), "the path has no {tenant}") {
		t.Fatalf("Verify = %v, want unknown tenant, the path has no {tenant}", err)
	}
}

func TestNewTenantsRefuses(t *testing.T) {
	stripe := func(secret string) *idemhook.Preset {
		p, err := provider.New("stripe", provider.Config{Secrets: []string{secret}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	github, err := provider.New("github", provider.Config{Secrets: []string{"gh"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		param   string
		presets map[string]*idemhook.Preset
		want    string
	}{
		{"none", "", nil, "no tenant"},
		{"bad name", "", map[string]*idemhook.Preset{"ac/me": stripe("a")}, `invalid tenant name "ac/me"`},
		{"dot dot", "", map[string]*idemhook.Preset{"..": stripe("a")}, `invalid tenant name ".."`},
		{"long name", "", map[string]*idemhook.Preset{strings.Repeat("a", 65): stripe("a")}, "longer than 64 bytes"},
		{"nil preset", "", map[string]*idemhook.Preset{"acme": nil}, `tenant "acme" has no preset`},
		{"bad param", "1x", map[string]*idemhook.Preset{"acme": stripe("a")}, `invalid wildcard name "1x"`},
		{"two providers", "", map[string]*idemhook.Preset{"acme": stripe("a"), "globex": github}, `tenants "acme" and "globex" differ in Name ("stripe", "github")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := provider.NewTenants(tc.param, tc.presets)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewTenants = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
