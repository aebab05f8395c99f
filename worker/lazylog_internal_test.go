package worker

import (
	"bytes"
	"log/slog"
	"testing"
)

// A logger with lazily attached attributes writes exactly what
// Logger.With writes, further With and WithGroup calls included, and
// formats nothing for records below the handler's level.
func TestWithLazyWritesAsWith(t *testing.T) {
	for _, mk := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler {
			return slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo})
		},
		func(b *bytes.Buffer) slog.Handler {
			return slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo})
		},
	} {
		var want, got bytes.Buffer
		args := []any{"subject", "prompts.r.1", "delivery", 2, slog.Group("g", "k", "v"), "id", "p-1"}
		logs := []*slog.Logger{slog.New(mk(&want)).With(args...), withLazy(slog.New(mk(&got)), args...)}
		for _, l := range logs {
			l.Debug("not written", "x", 1)
			l.Warn("transient failure", "failures", 3)
			l.With("more", true).Info("with more")
			l.WithGroup("grp").Error("grouped", "err", "boom")
		}
		strip := func(b []byte) []byte { // times differ
			var out [][]byte
			for _, line := range bytes.Split(b, []byte("\n")) {
				if i := bytes.Index(line, []byte("level")); i >= 0 {
					line = line[i:]
				}
				out = append(out, line)
			}
			return bytes.Join(out, []byte("\n"))
		}
		if !bytes.Equal(strip(got.Bytes()), strip(want.Bytes())) {
			t.Errorf("lazy logger wrote\n%s\nLogger.With wrote\n%s", got.String(), want.String())
		}
		if bytes.Contains(got.Bytes(), []byte("not written")) || got.Len() == 0 {
			t.Errorf("lazy logger wrote %q", got.String())
		}
	}
}

// BenchmarkSettleLogger is the logger settle makes for every prompt,
// which logs nothing when all goes well: Logger.With (with) against
// withLazy (lazy), side by side, on a text handler at Info.
func BenchmarkSettleLogger(b *testing.B) {
	var sink bytes.Buffer
	log := slog.New(slog.NewTextHandler(&sink, nil))
	for _, mode := range []string{"with", "lazy"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				args := []any{"subject", "aerie.prompts.run.0001234", "delivery", 1, "id", "prompt-0001234"}
				var l *slog.Logger
				if mode == "with" {
					l = log.With(args...)
				} else {
					l = withLazy(log, args...)
				}
				l.Debug("not written")
			}
		})
	}
}
