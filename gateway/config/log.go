package config

import (
	"io"
	"log/slog"
)

// Log is the log: section.
type Log struct {
	Format string // text | json
	Level  string // debug | info | warn | error
}

// NewLogger returns the logger the section configures, writing to w.
func (lc Log) NewLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(lc.Level)) // checked by Parse; an unknown level is info
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logFile is the log: section as decoded: each field a leaf that the
// checker below reads.
type logFile struct {
	Format leaf `yaml:"format"`
	Level  leaf `yaml:"level"`
}

// log checks the log: section.
func (c *checker) log(l *logFile) Log {
	return Log{
		Format: c.oneOf(l.Format, "log.format", "text", "text", "json"),
		Level:  c.oneOf(l.Level, "log.level", "info", "debug", "info", "warn", "error"),
	}
}
