package worker

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

// lazyAttrs is a handler that attaches attributes to the handler below
// only when a record is handled. Settling a prompt names it (subject,
// delivery, id) in whatever it logs, but most settlements log nothing,
// and slog's text and JSON handlers format attributes as soon as they
// are attached: on every prompt, that was most of settle's allocations
// besides the result itself. Records come out exactly as with
// Logger.With.
type lazyAttrs struct {
	h     slog.Handler
	attrs []slog.Attr
}

// withLazy is log.With(args...), formatting args only if log is used.
func withLazy(log *slog.Logger, args ...any) *slog.Logger {
	r := slog.NewRecord(time.Time{}, 0, "", 0)
	r.Add(args...)
	attrs := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a)
		return true
	})
	return slog.New(&lazyAttrs{h: log.Handler(), attrs: attrs})
}

func (l *lazyAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	return l.h.WithAttrs(l.attrs).Handle(ctx, r)
}

func (l *lazyAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &lazyAttrs{h: l.h, attrs: append(slices.Clip(l.attrs), attrs...)}
}

func (l *lazyAttrs) WithGroup(name string) slog.Handler {
	return l.h.WithAttrs(l.attrs).WithGroup(name)
}
