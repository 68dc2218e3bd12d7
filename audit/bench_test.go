package audit_test

import (
	"testing"

	"github.com/idemhook/idemhook/audit"
)

// BenchmarkRecorderRecord measures the cost Record adds to a request, from
// every core at once, with a sink that keeps up (the log sink without a
// logger).
func BenchmarkRecorderRecord(b *testing.B) {
	r := audit.NewRecorder(audit.NewLog(nil), audit.RecorderConfig{})
	e := entry(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Record(e)
		}
	})
	b.StopTimer()
	r.Close(b.Context())
	b.ReportMetric(float64(r.Dropped()), "dropped")
}
