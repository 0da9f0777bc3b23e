package main

import (
	"io"
	"log/slog"
)

// newLogger returns the -log-format handler at -log-level, writing to w.
func newLogger(cfg *config, w io.Writer) *slog.Logger {
	levels := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}
	opts := &slog.HandlerOptions{Level: levels[cfg.LogLevel.value]}
	if cfg.LogFormat.value == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
