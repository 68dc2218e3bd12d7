package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/problem"
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
//	GET    /admin/queue                   the delivery queue per queued route: counts, per-minute history
//	GET    /admin/queue/events            its events (filters, pagination)
//	GET    /admin/queue/events/{id}       one event and its attempts
//	POST   /admin/queue/redrive           queue events again, due now
//	POST   /admin/queue/pause             stop delivering a route's events
//	POST   /admin/queue/resume            deliver them again
//	POST   /admin/queue/purge             delete events undelivered, confirmed by their count
//	GET    /admin/                        the web console (console.go)
//
// With admin.token set, /metrics and /admin/ require
// "Authorization: Bearer <token>". The health probes never do, nor the
// console's static files, which hold no data.
func (g *Gateway) adminHandler(token string) http.Handler {
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
	g.handleQueueAdmin(mux, auth) // queue_admin.go
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

func newRecordJSON(key string, rec *idemhook.Record) adminapi.Record {
	out := adminapi.Record{StoreKey: key, State: rec.State.String(), CreatedAt: rec.CreatedAt.UTC()}
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

func (g *Gateway) getKey(w http.ResponseWriter, r *http.Request) {
	key := adminStoreKey(r)
	rec, err := g.store.Get(r.Context(), key)
	switch {
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "store error", err.Error())
	case rec == nil:
		g.keyNotFound(w, r, key)
	default:
		writeJSON(w, http.StatusOK, newRecordJSON(key, rec))
	}
}

func (g *Gateway) deleteKey(w http.ResponseWriter, r *http.Request) {
	key := adminStoreKey(r)
	found, err := g.store.Delete(r.Context(), key)
	switch {
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "store error", err.Error())
	case !found:
		g.keyNotFound(w, r, key)
	default:
		g.logger.Info("idemhook key deleted by the admin API", "key", key, "remote", r.RemoteAddr)
		w.WriteHeader(http.StatusNoContent)
	}
}

// scopeLookup bounds what a 404 of /admin/keys reads to name the scopes
// holding a key: the source's newest audit entries, and at most
// scopeLookupKeys store reads, one per distinct scope among them.
const (
	scopeLookupEntries = audit.MaxLimit
	scopeLookupKeys    = 10
)

// keyProblem is the 404 of /admin/keys/{source}/{key}: problem+json with,
// for a source of prefix routes, the scopes the key is stored under.
type keyProblem struct {
	adminapi.Problem
	Scopes []string `json:"scopes,omitempty"`
}

// keyNotFound answers 404 for the store key key. A prefix route scopes its
// keys by the request's path, so a key of one is never found without
// ?scope=: the answer says so, with an example, and names the scopes that
// hold the key among the source's newest deliveries in the audit trail.
// A ?scope= on a source with no prefix route is pointed out too.
func (g *Gateway) keyNotFound(w http.ResponseWriter, r *http.Request, key string) {
	source, scope := r.PathValue("source"), r.URL.Query().Get("scope")
	var prefixes, tenantPaths []string
	tenant := "acme" // an example
	for path, rc := range *g.audit.routes.Load() {
		switch {
		case rc.Route.Source != source:
		case strings.HasSuffix(path, "/"):
			prefixes = append(prefixes, path)
		case config.IsTenantPath(path):
			tenantPaths = append(tenantPaths, path)
			if len(rc.Tenants) > 0 {
				tenant = rc.Tenants[0].Name
			}
		}
	}
	slices.Sort(prefixes)
	slices.Sort(tenantPaths)
	p := keyProblem{Problem: adminapi.Problem{Type: "about:blank", Title: "no such key", Status: http.StatusNotFound,
		Detail: "nothing stored under " + key}}
	switch {
	case len(tenantPaths) > 0 && len(prefixes) == 0:
		// A route for many tenants: its keys are scoped by the tenant.
		found, why := g.scopesHolding(r.Context(), source, idemhook.NormalizeKey(r.PathValue("key")), scope)
		p.Scopes = found
		if len(found) > 0 {
			tenant = found[0]
		}
		if scope == "" {
			p.Detail += fmt.Sprintf(". Source %q has the route %s, whose keys are scoped by the tenant: add ?scope=<tenant>, e.g. %s?scope=%s",
				source, strings.Join(tenantPaths, ", "), r.URL.EscapedPath(), scopeQuery(tenant))
		} else {
			p.Detail += fmt.Sprintf(" (tenant %s of %s)", scope, strings.Join(tenantPaths, ", "))
		}
		p.Detail += ". " + why
	case len(prefixes) == 0 && scope == "":
		p.Detail += " (never stored, expired or deleted)"
	case len(prefixes) == 0:
		p.Detail += fmt.Sprintf(". No prefix route has source %q, so its keys have no scope: drop ?scope=", source)
	case len(prefixes) > 0:
		found, why := g.scopesHolding(r.Context(), source, idemhook.NormalizeKey(r.PathValue("key")), scope)
		p.Scopes = found
		example := strings.TrimSuffix(prefixes[0], "/") + "/acme"
		if len(found) > 0 {
			example = found[0]
		}
		routes := "the prefix route " + prefixes[0]
		if len(prefixes) > 1 {
			routes = "the prefix routes " + strings.Join(prefixes, ", ")
		}
		if scope == "" {
			p.Detail += fmt.Sprintf(". Source %q has %s, whose keys are scoped by the request's path: add ?scope=<path>, e.g. %s?scope=%s",
				source, routes, r.URL.EscapedPath(), scopeQuery(example))
		} else {
			p.Detail += fmt.Sprintf(" (scope %s of %s)", scope, routes)
		}
		p.Detail += ". " + why
	}
	problem.Write(w, http.StatusNotFound, problem.Extended(p)) // "?scope=<path>" as written
}

// scopesHolding returns the scopes other than skip under which key of
// source holds a record: the scopes of the source's newest
// scopeLookupEntries deliveries of key in the audit trail, each checked in
// the store. why says, in a sentence, what was found or why nothing could be.
func (g *Gateway) scopesHolding(ctx context.Context, source, key, skip string) (found []string, why string) {
	q := g.audit.querier
	if q == nil {
		return nil, fmt.Sprintf("The audit trail (sink %s) can't be queried to tell which scopes hold the key.", g.audit.sink)
	}
	page, err := q.Query(ctx, audit.Filter{Source: source, Limit: scopeLookupEntries})
	if err != nil {
		return nil, "The audit trail could not be read to tell which scopes hold the key: " + err.Error()
	}
	var scopes []string
	keyed := false
	for _, e := range page.Entries {
		if e.Key != key {
			continue
		}
		keyed = true
		if e.Scope != "" && e.Scope != skip && !slices.Contains(scopes, e.Scope) && len(scopes) < scopeLookupKeys {
			scopes = append(scopes, e.Scope)
		}
	}
	for _, sc := range scopes {
		if rec, err := g.store.Get(ctx, idemhook.ScopedStoreKey(source, sc, key)); err == nil && rec != nil {
			found = append(found, sc)
		}
	}
	within := fmt.Sprintf("the audit trail's last %d deliveries of %s", scopeLookupEntries, source)
	other := ""
	if skip != "" {
		other = " other"
	}
	switch {
	case !keyed:
		return nil, fmt.Sprintf("The key is not among %s, so no scope holding it can be named.", within)
	case len(found) == 0:
		return nil, fmt.Sprintf("No%s scope of its deliveries among %s holds it any more (expired or deleted).", other, within)
	case len(found) == 1:
		return found, fmt.Sprintf("It is stored under scope %s (from %s; \"scopes\" lists it).", found[0], within)
	}
	return found, fmt.Sprintf("It is stored under the scopes %s (from %s; \"scopes\" lists them).", strings.Join(found, ", "), within)
}

// scopeQuery escapes a scope as a query value, leaving its slashes as they
// are for legibility.
func scopeQuery(scope string) string {
	return strings.ReplaceAll(url.QueryEscape(scope), "%2F", "/")
}
