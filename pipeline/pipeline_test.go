package pipeline_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func promptsFile(t testing.TB, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := simulator.WritePrompts(f, n, 7); err != nil {
		t.Fatal(err)
	}
	return path
}

func config(t *testing.T, run, prompts string) pipeline.Config {
	return pipeline.Config{
		Run: run, PromptsFile: prompts, DataDir: t.TempDir(),
		Sim:     simulator.Config{Speed: 2000, OutputMedian: 150, MaxNumSeqs: 64},
		Workers: 2, Worker: worker.Config{Window: 16, Grace: 100 * time.Millisecond},
		EventInterval: 50 * time.Millisecond, Logger: quiet,
	}
}

type line struct {
	ID           string `json:"id"`
	Reasoning    string `json:"reasoning"`
	Content      string `json:"content"`
	FinishReason string `json:"finish_reason"`
	Usage        struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	LengthHint int `json:"length_hint"`
}

func readOutput(t *testing.T, path string) []line {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []line
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("bad output line: %v", err)
		}
		out = append(out, l)
	}
	return out
}

// Every reasoning shape a server may send ends up in the reasoning field,
// with the answer alone in content.
func TestReasoningShapes(t *testing.T) {
	for _, field := range []string{"reasoning", "reasoning_content", "think"} {
		t.Run(field, func(t *testing.T) {
			cfg := config(t, "shapes", promptsFile(t, 40))
			cfg.Sim.ReasoningField = field
			sum, err := pipeline.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !sum.Done || sum.Completed != 40 {
				t.Fatalf("summary %+v, want 40 completed", sum)
			}
			for _, l := range readOutput(t, sum.Completions) {
				if l.Reasoning == "" || l.Content == "" || strings.Contains(l.Content, "think>") || strings.Contains(l.Reasoning, "think>") {
					t.Errorf("%s: reasoning %q / content %q not separated", l.ID, l.Reasoning, l.Content)
				}
			}
		})
	}
}

// A run interrupted half way (Ctrl-C) and started again with the same
// command completes every prompt exactly once.
func TestInterruptAndResume(t *testing.T) {
	const n = 400
	cfg := config(t, "resume", promptsFile(t, n))
	out := filepath.Join(cfg.DataDir, "resume", "completions.jsonl")

	ctx, interrupt := context.WithCancel(context.Background())
	var seen atomic.Int64
	cfg.OnEvent = func(s schema.Throughput) {
		seen.Store(int64(s.Completed))
		if s.Completed >= n/4 {
			interrupt()
		}
	}
	sum, err := pipeline.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Done || sum.Completed >= n {
		t.Fatalf("first run was not interrupted: %+v", sum)
	}
	first := len(readOutput(t, out))
	t.Logf("interrupted after %d of %d", first, n)

	cfg.OnEvent = nil
	sum, err = pipeline.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lines := readOutput(t, out)
	count := map[string]int{}
	for _, l := range lines {
		count[l.ID]++
	}
	if !sum.Done || len(lines) != n || len(count) != n {
		t.Fatalf("after resume: done=%v, %d lines, %d distinct ids, want %d", sum.Done, len(lines), len(count), n)
	}

	// A third run finds everything done and generates nothing.
	sum, err = pipeline.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Done || len(readOutput(t, out)) != n {
		t.Fatalf("third run changed the output: %+v", sum)
	}
}

// A 60-second backend outage (simulated time) in the middle of a run:
// workers pause instead of spending attempts, and the run ends with every
// prompt completed and no dead letter. The outage begins once prompts are
// completing, through the simulator's admin API, so that it meets
// requests in flight however slowly the run starts.
func TestOutageMidRun(t *testing.T) {
	const n = 600
	cfg := config(t, "outage", promptsFile(t, n))
	cfg.Sim.Speed = 100
	cfg.Backend = simtest.Serve(t, cfg.Sim)

	var triggered atomic.Bool
	began := make(chan error, 1)
	cfg.OnEvent = func(s schema.Throughput) {
		if s.Completed >= n/10 && triggered.CompareAndSwap(false, true) {
			go func() { began <- beginOutage(cfg.Backend, "refuse", 60*time.Second) }()
		}
	}
	sum, err := pipeline.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !triggered.Load() {
		t.Fatalf("no event saw %d prompts completed: no outage began", n/10)
	}
	select {
	case err := <-began:
		if err != nil {
			t.Fatalf("begin the outage: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the simulator did not answer the outage request within a minute")
	}
	if !sum.Done || sum.Completed != n || sum.Failed != 0 {
		t.Fatalf("after the outage: %d completed, %d failed, done %v; want %d, 0, true", sum.Completed, sum.Failed, sum.Done, n)
	}
	if sum.Paused <= 0 || sum.HandedBack == 0 {
		t.Errorf("workers did not pause: paused %v, handed back %d", sum.Paused, sum.HandedBack)
	}
	t.Logf("outage of 60s simulated (%.1fs wall): paused %v in total, %d prompts handed back, 0 dead letters",
		60/cfg.Sim.Speed, sum.Paused.Round(time.Millisecond), sum.HandedBack)
}

// beginOutage starts an outage of the simulator at url through its admin
// API; d is simulated time.
func beginOutage(url, mode string, d time.Duration) error {
	resp, err := http.Post(fmt.Sprintf("%s/admin/outage?mode=%s&duration=%s", url, mode, d), "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return nil
}

// The run's settings are checked before anything starts: no server, no
// store, no simulator.
func TestSettingsCheckedFirst(t *testing.T) {
	for _, tc := range []struct {
		change func(*pipeline.Config)
		want   string
	}{
		{func(c *pipeline.Config) { c.ContextReasoning = schema.ContextReasoningKeep }, "applies only to turns all"},
		{func(c *pipeline.Config) { c.Turns = "first" }, `turns "first"`},
		{func(c *pipeline.Config) { c.Samples = 5000 }, "samples is 5000"},
	} {
		cfg := config(t, "settings", filepath.Join(t.TempDir(), "none.jsonl"))
		tc.change(&cfg)
		_, err := pipeline.Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one about %q", err, tc.want)
		}
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "nats")); !os.IsNotExist(err) {
			t.Errorf("the NATS store was created before the settings were checked: %v", err)
		}
	}
}
