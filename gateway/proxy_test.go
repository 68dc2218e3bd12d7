package gateway_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/gatewaytest"
	"github.com/idemhook/idemhook/provider"
)

// TestProviderSuccessStatus: the provider gets the status it counts as
// success whatever 2xx the backend chose (Asaas: exactly 200; iFood: 202),
// on the first delivery, on its replay and on a respond_within answer; a
// failure passes as it is.
func TestProviderSuccessStatus(t *testing.T) {
	var status, calls atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(status.Load()))
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer backend.Close()
	url, _, _ := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %[2]q}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /asaas
    upstream: %[1]s/hook
    source: asaas
    provider: asaas
    secrets: [tok]
  - path: /ifood
    upstream: %[1]s/hook
    source: ifood
    provider: ifood
    secrets: [ifood-secret]
  - path: /asaas-within
    upstream: %[1]s/hook
    source: asaas-within
    provider: asaas
    secrets: [tok]
    respond_within: 5s
`, backend.URL, t.TempDir()+"/idemhook.db"))
	asaas := func(path, id string) gatewaytest.Response {
		return gatewaytest.Post(t, url+path, `{"id":"`+id+`","event":"PAYMENT_RECEIVED"}`, provider.AsaasTokenHeader, "tok")
	}
	ifood := func(id string) gatewaytest.Response {
		body := `{"id":"` + id + `","code":"PLC"}`
		mac := hmac.New(sha256.New, []byte("ifood-secret"))
		mac.Write([]byte(body))
		return gatewaytest.Post(t, url+"/ifood", body, provider.IFoodSignatureHeader, hex.EncodeToString(mac.Sum(nil)))
	}
	tests := []struct {
		name     string
		backend  int
		send     func() gatewaytest.Response
		want     int
		replayed bool
		calls    int64
	}{
		{"asaas: a 201 becomes 200", 201, func() gatewaytest.Response { return asaas("/asaas", "evt_1") }, 200, false, 1},
		{"asaas: its replay", 201, func() gatewaytest.Response { return asaas("/asaas", "evt_1") }, 200, true, 1},
		{"asaas: a 204 becomes 200", 204, func() gatewaytest.Response { return asaas("/asaas", "evt_2") }, 200, false, 2},
		{"asaas: a failure passes", 500, func() gatewaytest.Response { return asaas("/asaas", "evt_3") }, 500, false, 3},
		{"ifood: a 200 becomes 202", 200, func() gatewaytest.Response { return ifood("evt_4") }, 202, false, 4},
		{"ifood: its replay", 200, func() gatewaytest.Response { return ifood("evt_4") }, 202, true, 4},
		{"respond_within: a 201 within the budget becomes 200", 201, func() gatewaytest.Response { return asaas("/asaas-within", "evt_5") }, 200, false, 5},
		{"respond_within: its replay", 201, func() gatewaytest.Response { return asaas("/asaas-within", "evt_5") }, 200, true, 5},
	}
	for _, tt := range tests {
		status.Store(int64(tt.backend))
		r := tt.send()
		if r.Status != tt.want || (r.Header.Get(idemhook.ReplayedHeader) == "true") != tt.replayed || calls.Load() != tt.calls {
			t.Errorf("%s: %d replayed=%q, backend called %d times; want %d replayed=%v, %d calls",
				tt.name, r.Status, r.Header.Get(idemhook.ReplayedHeader), calls.Load(), tt.want, tt.replayed, tt.calls)
		}
	}
}
