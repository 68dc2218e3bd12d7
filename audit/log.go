package audit

import (
	"context"
	"log/slog"
)

// LogMessage is the message of the line [Log] writes per delivery.
const LogMessage = "webhook delivery"

// Log is a [Sink] writing one INFO line per delivery to a slog.Logger, with
// every field of the entry as an attribute (reason and instance only when
// set). When the logger is enabled at DEBUG, the line also carries the
// entry's Decision (claimed, replayed, waited, released and why). The
// line's time is the delivery's time. Create it with [NewLog].
type Log struct {
	logger *slog.Logger
}

var _ Sink = (*Log)(nil)

// NewLog returns a sink logging to logger. A nil logger discards the
// entries.
func NewLog(logger *slog.Logger) *Log {
	return &Log{logger: logger}
}

// Write logs each entry. It never fails.
func (l *Log) Write(ctx context.Context, entries []Entry) error {
	if l.logger == nil {
		return nil
	}
	h := l.logger.Handler()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return nil
	}
	debug := h.Enabled(ctx, slog.LevelDebug)
	for _, e := range entries {
		r := slog.NewRecord(e.Time, slog.LevelInfo, LogMessage, 0)
		r.AddAttrs(
			slog.String("route", e.Route),
			slog.String("source", e.Source),
			slog.String("key", e.Key),
			slog.String("outcome", e.Outcome),
			slog.Int("status", e.Status),
			slog.Duration("duration", e.Duration),
			slog.Int64("request_bytes", e.RequestBytes),
			slog.Int64("response_bytes", e.ResponseBytes),
		)
		if e.Reason != "" {
			r.AddAttrs(slog.String("reason", e.Reason))
		}
		if e.Instance != "" {
			r.AddAttrs(slog.String("instance", e.Instance))
		}
		if e.Scope != "" {
			r.AddAttrs(slog.String("scope", e.Scope))
		}
		if debug && e.Decision != "" {
			r.AddAttrs(slog.String("decision", e.Decision))
		}
		// A handler's error (a full disk under the log file) is not the
		// delivery's problem. The other entries are still tried.
		_ = h.Handle(ctx, r)
	}
	return nil
}
