package config

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// queued is a queued route on the given store, with extra route lines.
func queued(store, extra string) string {
	stores := map[string]string{"sqlite": "driver: sqlite, path: /tmp/x.db", "redis": "driver: redis, url: redis://127.0.0.1:6379/0", "memory": "driver: memory"}
	return "store: {" + stores[store] + "}\n" + `routes:
  - path: /hooks/shop
    upstream: http://127.0.0.1:3000/hook
    source: shop
    deliver: queue
` + extra
}

func TestQueueDefaults(t *testing.T) {
	cfg, err := Parse("idemhook.yaml", []byte(queued("sqlite", "")), envOf())
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routes[0]
	if r.Deliver != DeliverQueue || r.Accept.Status != http.StatusAccepted || string(r.Accept.Body) != DefaultAcceptBody ||
		r.Accept.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("accept = %+v; want the default 202 JSON answer", r.Accept)
	}
	q := r.Queue
	if q.Concurrency != DefaultQueueConcurrency || q.MaxAge != DefaultQueueMaxAge || q.AttemptTimeout != r.UpstreamTimeout ||
		q.BackoffMin != time.Second || q.BackoffMax != 10*time.Minute || q.MaxQueued != DefaultQueueMaxQueued || q.MaxAttempts != 0 {
		t.Fatalf("queue = %+v; want the defaults", q)
	}
	// The key outlives the event: max_age plus a day, in whole days.
	if r.Route.TTL != 4*24*time.Hour {
		t.Fatalf("ttl = %s; want 96h (72h max_age plus a day)", r.Route.TTL)
	}
}

func TestQueuePresetAcceptStatus(t *testing.T) {
	cfg, err := Parse("idemhook.yaml", []byte(`store: {driver: sqlite, path: /tmp/x.db}
routes:
  - path: /hooks/asaas
    upstream: http://127.0.0.1:3000/hook
    source: asaas
    provider: asaas
    secrets: [tok]
    deliver: queue
    accept: {headers: {X-Accepted-By: idemhook}}
`), envOf())
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routes[0]
	if r.Accept.Status != http.StatusOK {
		t.Fatalf("accept status %d; want Asaas's 200", r.Accept.Status)
	}
	if r.Accept.Header.Get("X-Accepted-By") != "idemhook" || !strings.Contains(strings.Join(r.Route.ReplayHeaders, ","), "X-Accepted-By") {
		t.Fatalf("accept header %v, replay headers %v; want the header stored and replayed", r.Accept.Header, r.Route.ReplayHeaders)
	}
}

// TestQueuePresetAcceptBody: a queued route (or respond_within) with a
// preset that has a SuccessBody answers it as its accept answer, unless
// the route sets accept.body; a Content-Type of accept.headers stays.
func TestQueuePresetAcceptBody(t *testing.T) {
	const key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
	cfg, err := Parse("idemhook.yaml", []byte(`store: {driver: sqlite, path: /tmp/x.db}
routes:
  - path: /queued
    upstream: http://127.0.0.1:3000/hook
    source: queued
    provider: adyen
    secrets: [`+key+`]
    deliver: queue
  - path: /within
    upstream: http://127.0.0.1:3000/hook
    source: within
    provider: adyen
    secrets: [`+key+`]
    respond_within: 5s
  - path: /own-body
    upstream: http://127.0.0.1:3000/hook
    source: own-body
    provider: adyen
    secrets: [`+key+`]
    deliver: queue
    accept: {body: '{"ok":true}'}
  - path: /own-type
    upstream: http://127.0.0.1:3000/hook
    source: own-type
    provider: adyen
    secrets: [`+key+`]
    deliver: queue
    accept: {headers: {Content-Type: text/x-adyen}}
`), envOf())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ body, contentType string }{
		{"[accepted]", "text/plain; charset=utf-8"},
		{"[accepted]", "text/plain; charset=utf-8"},
		{`{"ok":true}`, "application/json"},
		{"[accepted]", "text/x-adyen"},
	} {
		r := cfg.Routes[i]
		if r.Accept.Status != http.StatusOK || string(r.Accept.Body) != want.body || r.Accept.Header.Get("Content-Type") != want.contentType {
			t.Errorf("%s: accept %d %q %q; want 200 %q %q", r.Path, r.Accept.Status, r.Accept.Body, r.Accept.Header.Get("Content-Type"), want.body, want.contentType)
		}
	}
}

func TestQueueConfigErrors(t *testing.T) {
	tests := []struct {
		name, give string
		want       []string
	}{
		{"redis refused", queued("redis", ""), []string{`idemhook.yaml:6: routes[0].deliver: deliver: queue and respond_within are refused on the redis store: Redis replicates asynchronously, so a failover can lose an event the provider was told was accepted. Use store driver sqlite (one gateway) or postgres (several gateways share one queue)`}},
		{"bad deliver", strings.Replace(queued("sqlite", ""), "deliver: queue", "deliver: queu", 1), []string{`idemhook.yaml:6: routes[0].deliver: invalid deliver "queu": did you mean "queue"? (want proxy or queue)`}},
		{"accept status", queued("sqlite", "    accept: {status: 500}\n"), []string{`idemhook.yaml:7: routes[0].accept.status: invalid status "500": the accept answer must be a 2xx, or the provider sends the event again`}},
		{"unknown queue field", queued("sqlite", "    queue: {max_age: 1h, retires: 3}\n"), []string{`idemhook.yaml:7: routes[0].queue.retires: unknown field "retires"`}},
		{"ttl under max_age", queued("sqlite", "    ttl: 24h\n    queue: {max_age: 48h}\n"), []string{`idemhook.yaml:7: routes[0].ttl: 24h is shorter than queue.max_age (2d): an event may stay queued longer than its key, and a re-send after the key expired would be delivered again; set ttl to at least 2d or lower queue.max_age`}},
		{"order_by", queued("sqlite", "    queue: {order_by: customer}\n"), []string{`idemhook.yaml:7: routes[0].queue.order_by: invalid order_by "customer": want header:<name> (header:X-Shop-Domain) or json:<field> (json:data.customer.id)`}},
		{"retry status", queued("sqlite", "    queue: {retry_statuses: [503]}\n"), []string{`idemhook.yaml:7: routes[0].queue.retry_statuses[0]: invalid status "503": want a 4xx to retry (5xx, 408 and 429 always are)`}},
		{"respond_within with order_by", strings.Replace(queued("sqlite", "    respond_within: 2s\n    queue: {order_by: \"header:X-G\"}\n"), "    deliver: queue\n", "", 1), []string{`idemhook.yaml:7: routes[0].queue.order_by: can't be kept with respond_within`}},
		{"respond_within on redis", strings.Replace(queued("redis", "    respond_within: 2s\n"), "    deliver: queue\n", "", 1), []string{`idemhook.yaml:6: routes[0].respond_within: deliver: queue and respond_within are refused on the redis store`}},
		{"backoff", queued("sqlite", "    queue: {backoff_min: 1m, backoff_max: 1s}\n"), []string{`idemhook.yaml:7: routes[0].queue.backoff_max: 1s is below backoff_min 1m`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("idemhook.yaml", []byte(tt.give), envOf())
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			got := strings.Split(err.Error(), "\n")
			for _, w := range tt.want {
				found := false
				for _, g := range got {
					if strings.HasPrefix(strings.TrimSpace(g), w) {
						found = true
					}
				}
				if !found {
					t.Errorf("errors:\n%s\nwant a line starting %q", err, w)
				}
			}
		})
	}
}

func TestQueueMemoryWarns(t *testing.T) {
	cfg, err := Parse("idemhook.yaml", []byte(queued("memory", "")), envOf())
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0].Msg, "a restart loses every event not yet delivered") || cfg.Warnings[0].Line != 6 {
		t.Fatalf("warnings %v; want the memory store's, at deliver's line", cfg.Warnings)
	}
}

func TestRespondWithin(t *testing.T) {
	cfg, err := Parse("idemhook.yaml", []byte(`store: {driver: sqlite, path: /tmp/x.db}
routes:
  - path: /hooks/slack
    upstream: http://127.0.0.1:3000/hook
    source: slack
    provider: slack
    secrets: [s]
    respond_within: 3s
`), envOf())
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routes[0]
	if !r.Queued() || r.Deliver != DeliverProxy || r.RespondWithin != 3*time.Second || r.Accept.Status != http.StatusAccepted || r.Queue.MaxAge != DefaultQueueMaxAge {
		t.Fatalf("route %+v; want a proxy route with a 3s budget and the queue's defaults", r)
	}
	if len(cfg.Warnings) != 1 || cfg.Warnings[0].Field != "routes[0].respond_within" || !strings.Contains(cfg.Warnings[0].Msg, "not below slack's response timeout (3s)") {
		t.Fatalf("warnings %v; want respond_within not below Slack's 3s", cfg.Warnings)
	}
}

// The response timeout respond_within is checked against is a spec's
// response_timeout for a provider described in the file, the preset's
// for one it names; none is checked where the provider documents none.
func TestRespondWithinSpecTimeout(t *testing.T) {
	spec := func(timeout, within string) string {
		text := "store: {driver: sqlite, path: /tmp/x.db}\n" + specRoute + "    respond_within: " + within + "\n"
		if timeout != "" {
			text = strings.Replace(text, "      retry_window: 2d\n", "      retry_window: 2d\n      response_timeout: "+timeout+"\n", 1)
		}
		return text
	}
	preset := func(name, within string) string {
		return fmt.Sprintf("store: {driver: sqlite, path: /tmp/x.db}\nroutes:\n  - path: /hooks/%[1]s\n    upstream: http://127.0.0.1:3000/hook\n    source: %[1]s\n    provider: %[1]s\n    secrets: [s]\n    respond_within: %[2]s\n", name, within)
	}
	tests := []struct {
		name, give string
		want       string // the warning's text, or "" for none
	}{
		{"a spec's timeout, reached", spec("5s", "5s"), "5s is not below acme's response timeout (5s): the provider counts the delivery as failed before the gateway answers; set it a second or more below, e.g. 4s"},
		{"a spec's timeout, passed", spec("5s", "6s"), "6s is not below acme's response timeout (5s)"},
		{"a spec's timeout, below", spec("5s", "4s"), ""},
		{"a spec without response_timeout", spec("", "60s"), ""},
		{"a preset's timeout, reached", preset("zoom", "3s"), "3s is not below zoom's response timeout (3s): the provider counts the delivery as failed before the gateway answers; set it a second or more below, e.g. 2s"},
		{"a preset's timeout, below", preset("github", "9s"), ""},
		{"a preset without a documented timeout", preset("stripe", "60s"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("idemhook.yaml", []byte(tt.give), envOf("ACME_SECRET", "acme-secret"))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range cfg.Warnings {
				if w.Field == "routes[0].respond_within" && strings.Contains(w.Msg, "response timeout") {
					got = append(got, w.Msg)
				}
			}
			switch {
			case tt.want == "" && len(got) != 0:
				t.Fatalf("warnings %q; want none about the response timeout", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Fatalf("warnings %q; want one with %q", got, tt.want)
			}
		})
	}
}
