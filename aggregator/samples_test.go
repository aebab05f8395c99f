package aggregator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

// publishResult stores r as its unit's result, the way a worker does.
func publishResult(t *testing.T, js jetstream.JetStream, r *schema.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.Run = run
	data, err := schema.EncodeResult(r)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(schema.ResultSubject(run, r.Unit()))
	m.Data = data
	m.Header.Set(schema.HeaderSchema, schema.SchemaHeader(schema.KindResult))
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}

func sampleResult(id string, sample int) *schema.Result {
	return &schema.Result{
		ID: id, Sample: sample, Messages: []schema.Message{{Role: "user", Content: "q " + id}},
		Model: "m", Content: fmt.Sprintf("answer %d to %s", sample, id), FinishReason: "stop",
		PromptTokens: 3, CompletionTokens: 100, Worker: "w", Attempts: 1,
	}
}

// publishDead stores d as its unit's dead letter.
func publishDead(t *testing.T, js jetstream.JetStream, d *schema.DeadLetter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.Run = run
	data, err := schema.EncodeDeadLetter(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, schema.DeadSubject(run, d.Unit()), data); err != nil {
		t.Fatal(err)
	}
}

// unitLine is what these tests read of an output line.
type unitLine struct {
	ID      string          `json:"id"`
	Sample  *int            `json:"sample"`
	Content string          `json:"content"`
	Error   string          `json:"error"`
	Turn    int             `json:"turn"`
	Params  json.RawMessage `json:"params"`
}

// unitLines returns a JSONL file's lines by "<id>/<sample>", failing on a
// unit written twice. A line without "sample" (written before samples
// existed) is sample 0.
func unitLines(t *testing.T, path string) map[string]unitLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]unitLine{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l unitLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.ID == "" {
			t.Fatalf("%s: bad line %q: %v", path, sc.Text(), err)
		}
		sample := 0
		if l.Sample != nil {
			sample = *l.Sample
		}
		key := fmt.Sprintf("%s/%d", l.ID, sample)
		if _, dup := out[key]; dup {
			t.Errorf("%s: %s written twice", path, key)
		}
		out[key] = l
	}
	return out
}

// Samples 0 to 2 of one prompt are three units: three lines, each once,
// although the first aggregator stopped before acknowledging what it had
// written (the results come again and are skipped by unit, not by id)
// and a line from before samples existed has no "sample" at all.
func TestSamplesOneLineEachAcrossRestart(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 6, Samples: 3, Prompts: 2}, nil)
	dir := t.TempDir()
	out := filepath.Join(dir, run, aggregator.CompletionsFile)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	// Written, never acknowledged: p0000 sample 0 in the old shape, and
	// p0001 sample 1.
	pre := `{"id":"p0000","content":"earlier","usage":{"completion_tokens":10}}` + "\n" +
		`{"id":"p0001","sample":1,"content":"earlier","usage":{"completion_tokens":10}}` + "\n"
	if err := os.WriteFile(out, []byte(pre), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, id := range []string{"p0000", "p0001"} {
		for sample := range 2 {
			publishResult(t, js, sampleResult(id, sample))
		}
	}
	a, stop := start(t, js, aggregator.Config{DataDir: dir, Batch: 1})
	var l schema.Throughput
	brokertest.Eventually(t, 20*time.Second, func() bool {
		l = a.Last()
		return l.Completed == 4
	}, "samples 0 and 1 written: %+v", &l)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	publishResult(t, js, sampleResult("p0000", 2))
	publishResult(t, js, sampleResult("p0001", 2))
	a, stop = start(t, js, aggregator.Config{DataDir: dir, ExitWhenDone: true})
	waitDone(t, a)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	lines := unitLines(t, out)
	if len(lines) != 6 {
		t.Errorf("%d lines, want 6: %v", len(lines), lines)
	}
	for _, id := range []string{"p0000", "p0001"} {
		for sample := range 3 {
			l, ok := lines[fmt.Sprintf("%s/%d", id, sample)]
			switch {
			case !ok:
				t.Errorf("%s sample %d has no line", id, sample)
			case l.Sample == nil && !(id == "p0000" && sample == 0):
				t.Errorf("%s sample %d: line without \"sample\"", id, sample)
			}
		}
	}
	if l := lines["p0000/0"]; l.Content != "earlier" {
		t.Errorf("p0000 sample 0 rewritten: %+v", l)
	}
	if l := lines["p0000/2"]; l.Content != "answer 2 to p0000" {
		t.Errorf("p0000 sample 2 = %+v", l)
	}
	if last := a.Last(); last.Completed != 6 || last.Total != 6 || last.Phase != schema.PhaseDone {
		t.Errorf("last event %+v, want 6 of 6 completed, done", last)
	}
}

// Failures are per unit too: each failed sample has its own line with its
// sample, turn and parameters, and a sample that completes after all
// takes out only its own line.
func TestFailedLinePerSample(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 3, Samples: 3, Prompts: 1}, nil)
	temp := 0.5
	msgs := []schema.Message{{Role: "user", Content: "q"}}
	publishDead(t, js, &schema.DeadLetter{ID: "p0000", Sample: 0, Messages: msgs, Reason: schema.ReasonExhausted,
		Error: "zero", Attempts: 5, FailedAt: time.Now().UTC()})
	publishDead(t, js, &schema.DeadLetter{ID: "p0000", Sample: 2, Turn: 2, Messages: msgs, Reason: schema.ReasonPermanent,
		Error: "two", Attempts: 1, FailedAt: time.Now().UTC(), Params: &schema.Params{Temperature: &temp}})
	publishResult(t, js, sampleResult("p0000", 1))
	dir := t.TempDir()
	a, stop := start(t, js, aggregator.Config{DataDir: dir})
	var l schema.Throughput
	brokertest.Eventually(t, 20*time.Second, func() bool {
		l = a.Last()
		return l.Completed == 1 && l.Failed == 2 && l.Phase == schema.PhaseDone
	}, "one completed, two failed: %+v", &l)

	failed := unitLines(t, filepath.Join(dir, run, aggregator.FailedFile))
	if len(failed) != 2 || failed["p0000/0"].Error != "zero" || failed["p0000/2"].Error != "two" {
		t.Fatalf("failed.jsonl = %+v, want samples 0 and 2", failed)
	}
	if l := failed["p0000/2"]; l.Turn != 2 || string(l.Params) != `{"temperature":0.5}` {
		t.Errorf("sample 2's failed line: turn %d, params %s; want 2 and the prompt's own", l.Turn, l.Params)
	}
	if l := failed["p0000/0"]; l.Sample == nil || l.Turn != 0 || l.Params != nil {
		t.Errorf("sample 0's failed line: %+v, want \"sample\":0 and no turn or params", l)
	}

	publishResult(t, js, sampleResult("p0000", 0))
	brokertest.Eventually(t, 20*time.Second, func() bool {
		l = a.Last()
		return l.Completed == 2 && l.Failed == 1
	}, "sample 0 completed after all: %+v", &l)
	stop()
	failed = unitLines(t, filepath.Join(dir, run, aggregator.FailedFile))
	if _, ok := failed["p0000/2"]; len(failed) != 1 || !ok {
		t.Errorf("failed.jsonl = %+v, want only sample 2", failed)
	}
	if got := unitLines(t, filepath.Join(dir, run, aggregator.CompletionsFile)); len(got) != 2 {
		t.Errorf("completions.jsonl = %+v, want samples 0 and 1", got)
	}
}

// With --turns all, throughput events count turns: a three-turn
// conversation written, a three-turn one failed, a five-turn one whose
// second turn was cut and kept (three turns never run), and the interim
// turns a live worker reports.
func TestThroughputCountsTurns(t *testing.T) {
	_, nc, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: 4, Turns: schema.TurnsAll, TotalTurns: 3 + 3 + 5 + 2}, nil)
	conv := func(turns int) []schema.Message {
		var m []schema.Message
		for i := range turns - 1 {
			m = append(m, schema.Message{Role: "user", Content: fmt.Sprint("q", i)},
				schema.Message{Role: "assistant", Content: fmt.Sprint("a", i), FinishReason: "stop",
					Usage: &schema.Usage{PromptTokens: 5, CompletionTokens: 10}})
		}
		return append(m, schema.Message{Role: "user", Content: "last"})
	}
	done := sampleResult("p0000", 0)
	done.Messages, done.Turns, done.CompletionTokens = conv(3), 3, 50
	publishResult(t, js, done)
	publishDead(t, js, &schema.DeadLetter{ID: "p0001", Messages: conv(3), Turn: 2, Reason: schema.ReasonExhausted, FailedAt: time.Now().UTC()})
	cut := sampleResult("p0002", 0)
	cut.Messages = append(conv(2), schema.Message{Role: "assistant", Content: "input answer"},
		schema.Message{Role: "user", Content: "q"}, schema.Message{Role: "assistant", Content: "input answer"},
		schema.Message{Role: "user", Content: "q"}, schema.Message{Role: "assistant", Content: "input answer"},
		schema.Message{Role: "user", Content: "q"})
	cut.Turns, cut.Truncated, cut.FinishReason, cut.CompletionTokens = 2, true, "length", 100
	publishResult(t, js, cut)

	dir := t.TempDir()
	a, stop := start(t, js, aggregator.Config{DataDir: dir})
	defer stop()
	hb, _ := json.Marshal(schema.Heartbeat{Run: run, Worker: "w", Time: time.Now(), Window: 4, InFlight: 1, InterimTurns: 1})
	var l schema.Throughput
	brokertest.Eventually(t, 20*time.Second, func() bool {
		_ = nc.Publish(schema.HeartbeatSubject(run, "w"), hb)
		l = a.Last()
		return l.Completed == 2 && l.Failed == 1 && l.CompletedTurns == 3+3+5+1
	}, "12 of 13 turns accounted for: %+v", &l)
	if l.TotalTurns != 13 || l.Total != 4 {
		t.Errorf("totals: %d lines, %d turns; want 4 and 13", l.Total, l.TotalTurns)
	}
	b, err := os.ReadFile(filepath.Join(dir, run, aggregator.CompletionsFile))
	if err != nil || !strings.Contains(string(b), `"turns":3`) {
		t.Errorf("completions.jsonl = %s (%v), want a line with \"turns\":3", b, err)
	}
}
