package config

import (
	"io"
	"log/slog"

	"go.yaml.in/yaml/v3"
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

// logSchema is the log: section.
var logSchema = table[Log]{fields: []field[Log]{
	{name: "format", to: func(l *Log) any { return &l.Format }, def: "text", enum: []string{"text", "json"}},
	{name: "level", to: func(l *Log) any { return &l.Level }, def: "info", enum: []string{"debug", "info", "warn", "error"}},
}}

// log checks the log: section, n.
func (c *checker) log(n *yaml.Node) (l Log) {
	logSchema.read(c, valuesOf(n), n, "log", &l)
	return l
}
