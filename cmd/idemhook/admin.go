package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemhook/idemhook"
)

// adminHandler serves the admin listener:
//
//	GET    /healthz                       200 while the process runs
//	GET    /readyz                        200 when the store takes a claim, else 503 naming what is down
//	GET    /metrics                       Prometheus metrics
//	GET    /admin/deliveries              the audit trail (filters, pagination)
//	GET    /admin/keys/{source}/{key...}  the record stored for a key
//	DELETE /admin/keys/{source}/{key...}  delete it, to force reprocessing
//	GET    /admin/stats                   deliveries per source, last hour and day
//	GET    /admin/                        the web console (console.go)
//
// With admin.token set, /metrics and /admin/ require
// "Authorization: Bearer <token>". The health probes never do, nor the
// console's static files, which hold no data.
func (g *gateway) adminHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", g.serveReady)
	auth := func(next http.Handler) http.Handler { return bearer(token, next) }
	mux.Handle("GET /metrics", auth(g.metrics.handler()))
	mux.Handle("GET /admin/deliveries", auth(http.HandlerFunc(g.audit.serveDeliveries)))
	mux.Handle("GET /admin/keys/{source}/{key...}", auth(http.HandlerFunc(g.getKey)))
	mux.Handle("DELETE /admin/keys/{source}/{key...}", auth(http.HandlerFunc(g.deleteKey)))
	g.handleConsole(mux, auth)
	return mux
}

// bearer requires the admin token, when one is configured.
func bearer(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	// Compare SHA-256 digests: ConstantTimeCompare returns at once when the
	// lengths differ, which would tell a caller the token's length.
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		sum := sha256.Sum256([]byte(got))
		// The scheme is case-insensitive (RFC 9110 section 11.1).
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idemhook admin"`)
			writeProblem(w, http.StatusUnauthorized, "unauthorized", "send Authorization: Bearer <admin.token>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recordJSON is a stored record as the admin API shows it.
type recordJSON struct {
	StoreKey     string              `json:"store_key"`
	State        string              `json:"state"`
	CreatedAt    time.Time           `json:"created_at"`
	Status       int                 `json:"status,omitempty"`
	Headers      map[string][]string `json:"headers,omitempty"`
	Body         *string             `json:"body,omitempty"`
	BodyEncoding string              `json:"body_encoding,omitempty"` // "text" or "base64"
	BodyOmitted  bool                `json:"body_omitted,omitempty"`
}

func newRecordJSON(key string, rec *idemhook.Record) recordJSON {
	out := recordJSON{StoreKey: key, State: rec.State.String(), CreatedAt: rec.CreatedAt.UTC()}
	if rec.State != idemhook.StateCompleted {
		return out
	}
	out.Status, out.Headers, out.BodyOmitted = rec.Status, rec.Header, rec.BodyOmitted
	body, enc := string(rec.Body), "text"
	if !utf8.Valid(rec.Body) {
		body, enc = base64.StdEncoding.EncodeToString(rec.Body), "base64"
	}
	out.Body, out.BodyEncoding = &body, enc
	return out
}

// adminStoreKey returns the store key named by the request's {source} and
// {key}, and the scope in ?scope= (on a prefix route, the request's path,
// e.g. /t/acme). The key is normalized as the middleware normalizes a
// delivery's key (a long or non-ASCII key stored under its SHA-256, a
// quoted one unquoted), so that an operator can paste the key a provider
// sent. The stored form (e.g. "sha256:...") normalizes to itself.
func adminStoreKey(r *http.Request) string {
	return idemhook.ScopedStoreKey(r.PathValue("source"), r.URL.Query().Get("scope"), idemhook.NormalizeKey(r.PathValue("key")))
}

func (g *gateway) getKey(w http.ResponseWriter, r *http.Request) {
	key := adminStoreKey(r)
	rec, err := g.store.Get(r.Context(), key)
	switch {
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "store error", err.Error())
	case rec == nil:
		writeProblem(w, http.StatusNotFound, "no such key", "nothing stored under "+key)
	default:
		writeJSON(w, http.StatusOK, newRecordJSON(key, rec))
	}
}

func (g *gateway) deleteKey(w http.ResponseWriter, r *http.Request) {
	key := adminStoreKey(r)
	found, err := g.store.Delete(r.Context(), key)
	switch {
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "store error", err.Error())
	case !found:
		writeProblem(w, http.StatusNotFound, "no such key", "nothing stored under "+key)
	default:
		g.logger.Info("idemhook key deleted by the admin API", "key", key, "remote", r.RemoteAddr)
		w.WriteHeader(http.StatusNoContent)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// trimmed is used for a query parameter.
func trimmed(r *http.Request, name string) string {
	return strings.TrimSpace(r.URL.Query().Get(name))
}
