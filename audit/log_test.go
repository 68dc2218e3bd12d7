package audit_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
)

func TestLog(t *testing.T) {
	var buf bytes.Buffer
	sink := audit.NewLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	entries := []audit.Entry{
		{Time: base, Route: "/webhooks/stone", Source: "stone", Key: "sha256:abc", Outcome: "processed", Status: 200,
			Duration: 1500 * time.Microsecond, RequestBytes: 321, ResponseBytes: 17},
		{Time: base.Add(time.Second), Route: "/webhooks/stripe", Source: "stripe", Key: "evt_1", Outcome: "replayed", Status: 200},
	}
	if err := sink.Write(t.Context(), entries); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&buf)
	for i, e := range entries {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		want := map[string]any{
			"time":           e.Time.Format(time.RFC3339Nano),
			"level":          "INFO",
			"msg":            audit.LogMessage,
			"route":          e.Route,
			"source":         e.Source,
			"key":            e.Key,
			"outcome":        e.Outcome,
			"status":         float64(e.Status),
			"duration":       float64(e.Duration),
			"request_bytes":  float64(e.RequestBytes),
			"response_bytes": float64(e.ResponseBytes),
		}
		if len(line) != len(want) {
			t.Errorf("line %d has %d fields, want %d: %v", i, len(line), len(want), line)
		}
		for k, v := range want {
			if line[k] != v {
				t.Errorf("line %d: %s = %v, want %v", i, k, line[k], v)
			}
		}
	}
	if dec.More() {
		t.Error("more lines than entries")
	}
}

func TestLogDisabled(t *testing.T) {
	var buf bytes.Buffer
	sink := audit.NewLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := sink.Write(t.Context(), []audit.Entry{{Source: "stone"}}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Errorf("a logger at WARN got %q", buf.String())
	}
	if err := audit.NewLog(nil).Write(t.Context(), []audit.Entry{{Source: "stone"}}); err != nil {
		t.Errorf("nil logger: %v", err)
	}
}

// Reason and instance are logged when set. The decision is logged only at
// DEBUG.
func TestLogReasonInstanceDecision(t *testing.T) {
	e := audit.Entry{Time: base, Route: "/wh", Source: "stripe", Outcome: "signature_invalid", Status: 401,
		Reason: "stripe: no valid signature", Instance: "gw-1", Decision: "signature check failed; refused with 401, nothing claimed"}
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		sink := audit.NewLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level})))
		if err := sink.Write(t.Context(), []audit.Entry{e}); err != nil {
			t.Fatal(err)
		}
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("%v: %v", level, err)
		}
		if line["level"] != "INFO" || line["reason"] != e.Reason || line["instance"] != e.Instance {
			t.Errorf("at %v: %v", level, line)
		}
		_, hasDecision := line["decision"]
		if wantDecision := level == slog.LevelDebug; hasDecision != wantDecision || wantDecision && line["decision"] != e.Decision {
			t.Errorf("at %v: decision %v, want it present: %t", level, line["decision"], wantDecision)
		}
	}
}
