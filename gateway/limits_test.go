package gateway

import (
	"math"
	"testing"

	"github.com/idemhook/idemhook/gateway/config"
)

func TestResolveLimits(t *testing.T) {
	tests := []struct {
		name     string
		give     config.Limits
		memLimit int64
		files    uint64
		want     config.Limits
		largest  int64
		whyBody  string
	}{
		{"nothing known", config.Limits{}, math.MaxInt64, 0,
			config.Limits{BodyMemory: 256 << 20, MaxConnections: 8192, MaxDeliveries: 8192}, 0, "the default, with no memory limit set"},
		{"a memory limit and 256 files", config.Limits{}, 512 << 20, 256,
			config.Limits{BodyMemory: 128 << 20, MaxConnections: 64, MaxDeliveries: 64}, 0, "a quarter of the memory limit 512MiB"},
		{"many files: capped", config.Limits{}, 1 << 30, 1 << 20,
			config.Limits{BodyMemory: 256 << 20, MaxConnections: 8192, MaxDeliveries: 8192}, 0, "a quarter of the memory limit 1GiB"},
		{"few files: at least 64", config.Limits{}, math.MaxInt64, 100,
			config.Limits{BodyMemory: 256 << 20, MaxConnections: 64, MaxDeliveries: 64}, 0, "the default, with no memory limit set"},
		{"1024 files", config.Limits{}, math.MaxInt64, 1024,
			config.Limits{BodyMemory: 256 << 20, MaxConnections: 448, MaxDeliveries: 448}, 0, "the default, with no memory limit set"},
		{"set in the file", config.Limits{BodyMemory: 10 << 20, MaxConnections: 100, MaxDeliveries: 50}, 512 << 20, 256,
			config.Limits{BodyMemory: 10 << 20, MaxConnections: 100, MaxDeliveries: 50}, 0, "limits.body_memory"},
		{"a route's max_body above the derived budget", config.Limits{}, 512 << 20, 256,
			config.Limits{BodyMemory: 512<<20 + 2, MaxConnections: 64, MaxDeliveries: 64}, 256 << 20, "a quarter of the memory limit 512MiB, raised to hold two of the largest max_body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolveLimits(tt.give, tt.memLimit, tt.files, tt.largest)
			if got.Limits != tt.want || got.Why.BodyMemory != tt.whyBody {
				t.Fatalf("got %+v (%q), want %+v (%q)", got.Limits, got.Why.BodyMemory, tt.want, tt.whyBody)
			}
		})
	}
}
