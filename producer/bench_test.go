package producer

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/broker/brokertest"
)

// BenchmarkProduce measures a whole produce (validation pass, manifest,
// publishing pass) of 10,000 small prompts to an embedded server, each
// iteration a new run. The figure that matters is prompts/s.
func BenchmarkProduce(b *testing.B) {
	const n = 10000
	s := brokertest.Start(b)
	_, js := brokertest.Connect(b, s)
	file := filepath.Join(b.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(promptLines(0, n), "\n")+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := Config{PromptsFile: file, Model: "m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := ctxFor(b)
	i := 0
	for b.Loop() {
		i++
		cfg.Run = fmt.Sprintf("bench-%d", i)
		rep, err := Run(ctx, js, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Published != n {
			b.Fatalf("published %d, want %d", rep.Published, n)
		}
	}
	b.ReportMetric(float64(n*i)/b.Elapsed().Seconds(), "prompts/s")
}
