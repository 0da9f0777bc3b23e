package main

import (
	"io"
	"log/slog"
)

// newLogger returns the -log-format handler at -log-level, writing to w.
func newLogger(cfg *config, w io.Writer) *slog.Logger {
	levels := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}
	opts := &slog.HandlerOptions{Level: levels[cfg.LogLevel.value], ReplaceAttr: durationString}
	if cfg.LogFormat.value == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// durationString writes every duration one way in both formats, as Go
// writes it ("5s", "1.5ms"): the JSON handler would write nanoseconds.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
