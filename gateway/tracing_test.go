package gateway

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestOpenTracingSettings(t *testing.T) {
	tests := []struct {
		give    map[string]string
		wantOn  bool
		wantErr string
	}{
		{give: map[string]string{}, wantOn: false},
		{give: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, wantOn: true},
		{give: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, wantOn: true},
		{give: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, wantOn: false},
		{give: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, wantOn: false},
		{give: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTLP only"},
		{give: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "http/protobuf"},
		{give: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantOn: true},
	}
	for _, tt := range tests {
		tr, err := openTracing(context.Background(), func(k string) string { return tt.give[k] }, slog.New(slog.DiscardHandler), "(devel)")
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: err = %v, want one saying %q", tt.give, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", tt.give, err)
		case (tr != nil) != tt.wantOn:
			t.Errorf("%v: tracing on = %v, want %v", tt.give, tr != nil, tt.wantOn)
		}
		if err := tr.shutdown(); err != nil {
			t.Errorf("%v: shutdown: %v", tt.give, err)
		}
	}
}

// Without OTEL_* variables, tracing is off: openTracing returns nil.
func TestTracingOffWithoutVariables(t *testing.T) {
	tr, err := openTracing(context.Background(), func(string) string { return "" }, slog.New(slog.DiscardHandler), "(devel)")
	if err != nil || tr != nil {
		t.Fatalf("openTracing without variables = %v, %v; want nil (off)", tr, err)
	}
}
