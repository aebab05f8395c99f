package export_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/export"
	"github.com/aerie-dev/aerie/schema"
)

// fixtureUnits reads the fixture run's lines back into the results and
// dead letters they were made from.
func fixtureUnits(t *testing.T) ([]*schema.Result, []*schema.DeadLetter) {
	t.Helper()
	var results []*schema.Result
	var dead []*schema.DeadLetter
	f, err := os.Open("testdata/run/completions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = dataset.ReadCompletions(f, "completions.jsonl", func(l *dataset.CompletionLine) error {
		results = append(results, &schema.Result{ID: l.ID, Sample: l.Sample, Messages: l.Messages, Model: l.Model, Params: l.Params,
			Reasoning: l.Reasoning, Content: l.Content, FinishReason: l.FinishReason, Truncated: l.Truncated,
			PromptTokens: l.Usage.PromptTokens, CompletionTokens: l.Usage.CompletionTokens, Worker: l.Worker, Attempts: l.Attempts,
			TTFTMillis: l.TTFTMillis, LatencyMs: l.LatencyMs, FinishedAt: l.FinishedAt, Turns: l.Turns, TurnsPlanned: l.TurnsPlanned,
			PromptTokenIDs: l.PromptTokenIDs, TokenIDs: l.TokenIDs})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := os.Open("testdata/run/failed.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	err = dataset.ReadFailed(g, "failed.jsonl", func(l *dataset.FailedLine) error {
		dead = append(dead, &schema.DeadLetter{ID: l.ID, Sample: l.Sample, Turn: l.Turn, Messages: l.Messages, Reason: l.Reason,
			Status: l.Status, Error: l.Error, Body: l.Body, Attempts: l.Attempts, Worker: l.Worker, FailedAt: l.FailedAt, Params: l.Params})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return results, dead
}

func publish(t *testing.T, js jetstream.JetStream, subject, kind string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(schema.HeaderSchema, schema.SchemaHeader(kind))
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}

func sortedLines(s string) []string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	slices.Sort(lines)
	return lines
}

// --from-stream rebuilds, from the results and dead letters stored in
// NATS, the same export as the run's files, in every format; another
// run's messages on the same server stay out, and an undecodable result
// is counted, not fatal.
func TestExportFromStream(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	results, dead := fixtureUnits(t)
	for _, run := range []string{"demo", "other"} {
		for _, r := range results {
			r.Run = run
			b, err := schema.EncodeResult(r)
			if err != nil {
				t.Fatal(err)
			}
			publish(t, js, schema.ResultSubject(run, r.Unit()), schema.KindResult, b)
		}
		for _, d := range dead {
			d.Run = run
			b, err := schema.EncodeDeadLetter(d)
			if err != nil {
				t.Fatal(err)
			}
			publish(t, js, schema.DeadSubject(run, d.Unit()), schema.KindDeadLetter, b)
		}
	}
	publish(t, js, schema.ResultSubject("demo", schema.Unit{ID: "garbled"}), schema.KindResult, []byte("not msgpack"))

	tmpl, err := export.ParseChatTemplate([]byte(qwenTemplate))
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []export.Options{
		{Format: export.FormatSpecForge}, {Format: export.FormatShareGPT}, {Format: export.FormatOpenAIBatch},
		{Format: export.FormatText, ChatTemplate: tmpl}, {Format: export.FormatSpeculators},
		{Format: export.FormatOpenAIBatch, Drop: []string{}},
	} {
		want, wantSum, err := exported(t, export.Files("testdata/run"), opts)
		if err != nil {
			t.Fatal(err)
		}
		streams := &export.Streams{JS: js, Run: "demo"}
		got, sum, err := exported(t, streams, opts)
		if err != nil {
			t.Fatalf("%s from the streams: %v", opts.Format, err)
		}
		if !slices.Equal(sortedLines(got), sortedLines(want)) {
			t.Errorf("%s from the streams:\n%s\nfrom the files:\n%s", opts.Format, got, want)
		}
		if sum.RowsWritten != wantSum.RowsWritten || streams.Undecodable != 1 {
			t.Errorf("%s: %d written (files: %d), %d undecodable", opts.Format, sum.RowsWritten, wantSum.RowsWritten, streams.Undecodable)
		}
	}

	// A run with nothing stored exports nothing, without waiting.
	got, sum, err := exported(t, &export.Streams{JS: js, Run: "empty"}, export.Options{Format: export.FormatOpenAIBatch})
	if err != nil || got != "" || sum.RowsWritten != 0 {
		t.Errorf("empty run: %q, %+v, %v", got, sum, err)
	}
}

// A failed export leaves no file where there was none, keeps the one
// that was there untouched, and leaves no temporary file behind.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	boom := errors.New("interrupted")
	half := func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		bw.WriteString(`{"id":"a"}` + "\n" + `{"id":`)
		bw.Flush()
		return boom
	}
	if err := dataset.WriteFileAtomic(out, half); err != boom {
		t.Fatalf("error %v, want the writer's", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an interrupted export left %s: %v", out, err)
	}
	if err := dataset.WriteFileAtomic(out, func(w io.Writer) error { _, err := io.WriteString(w, "old\n"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := dataset.WriteFileAtomic(out, half); err != boom {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "old\n" {
		t.Errorf("an interrupted export changed the file to %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left in the directory: %v", entries)
	}
	// An export of a run whose completions.jsonl is not there says what
	// to check.
	err := dataset.WriteFileAtomic(filepath.Join(dir, "x.jsonl"), func(w io.Writer) error {
		_, err := export.Write(context.Background(), export.Files(filepath.Join(dir, "nope")), w, export.Options{Format: export.FormatSpecForge})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("missing completions.jsonl: %v", err)
	}
}
