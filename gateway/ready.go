package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
)

// probeLease is the lease of the probe's claim. Were its release lost, the
// probe key would go away by itself this soon.
const probeLease = 10 * time.Second

// probeStore does to the store what a delivery does. It claims a fresh
// probe key and releases it, each call bounded by timeout (the middleware's
// store deadline). That way a store that answers reads but fails writes (a
// Redis replica that refuses writes, a lost SQLite file) is seen as down.
// The gateway's SQLite store holds claims in memory, so there the claim
// writes nothing: it fails, and so the probe, once a write to the file has
// failed, until one succeeds again (sqlitestore's Config.Lock). It returns
// the failing step's error.
func probeStore(ctx context.Context, s idemhook.Store, timeout time.Duration) error {
	var tok [12]byte
	rand.Read(tok[:]) //nolint:errcheck // crypto/rand.Read never fails
	key := idemhook.StoreKey("idemhook", "readyz:"+hex.EncodeToString(tok[:]))
	claim := &idemhook.Record{State: idemhook.StatePending, Token: string(tok[:]), CreatedAt: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	existing, err := s.Claim(cctx, key, claim, probeLease)
	cancel()
	switch {
	case err != nil:
		return fmt.Errorf("claim of a probe key: %w", err)
	case existing != nil:
		return errors.New("claim of a fresh probe key found a record: the store does not answer what it was asked")
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.Release(rctx, key, claim); err != nil {
		return fmt.Errorf("release of a probe key: %w", err)
	}
	return nil
}

// storeDesc names the store in /readyz and the start-up WARN.
func storeDesc(sc config.Store) string {
	switch sc.Driver {
	case "sqlite":
		return "sqlite " + sc.Path
	case "redis":
		if sc.URL != "" {
			return "redis " + config.RedactURL(sc.URL)
		}
		return "redis " + strings.Join(sc.Addrs, ",")
	}
	return sc.Driver
}

// serveReady is GET /readyz: one line per dependency, "ok" or what is
// wrong. It answers 200 while the store takes a claim and a release within
// the store deadline. Otherwise it answers 503, since deliveries then go
// unprotected (or are refused). An audit sink that is down is reported but
// keeps 200. Its entries wait and are retried, and the webhooks are not
// affected. A load balancer taking every gateway out during an audit
// database outage would stop the webhooks the trail observes.
func (g *Gateway) serveReady(w http.ResponseWriter, r *http.Request) {
	status := http.StatusOK
	var b strings.Builder
	store := "store (" + storeDesc(g.cfg.Store) + "): ok"
	if err := probeStore(r.Context(), g.store, g.mw.StoreTimeout()); err != nil {
		status = http.StatusServiceUnavailable
		store = "store (" + storeDesc(g.cfg.Store) + "): down: " + err.Error()
	}
	audit, _ := g.audit.health()
	// One line per dependency: drivers' errors may span lines (pgx lists
	// every address it tried).
	oneLine := strings.NewReplacer("\r", "", "\n\t", "; ", "\n", "; ", "\t", " ")
	store, audit = oneLine.Replace(store), oneLine.Replace(audit)
	if status == http.StatusOK {
		b.WriteString("ok\n")
	} else {
		b.WriteString("not ready: the store fails; deliveries fail open or closed per route\n")
	}
	b.WriteString(store + "\n" + audit + "\n")
	if q := g.queues.Load(); q != nil {
		// Kept settlements don't make the gateway unready: claims work, and
		// each is retried at every poll.
		for _, qr := range q.list() {
			if n := q.disp.SettlesPending(qr.name); n > 0 {
				fmt.Fprintf(&b, "queue %s: %d attempt outcomes not yet recorded by the store; kept and retried at every poll\n", qr.name, n)
			}
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write([]byte(b.String()))
}
