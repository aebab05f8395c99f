package main

import (
	"fmt"
	"io"
	"log/slog"
)

type logFlags struct{ level, format string }

// logger builds the process logger, writing to w.
func (lf *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(lf.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", lf.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch lf.format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: use text or json", lf.format)
	}
	l := slog.New(h)
	slog.SetDefault(l)
	return l, nil
}
