package report_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/report"
	"github.com/aerie-dev/aerie/schema"
)

// runDir writes a run's files from lines, each file's lines joined by
// newlines and ended by one unless the last is to be cut short.
type runDir struct {
	t   *testing.T
	dir string
}

func newRunDir(t *testing.T) *runDir {
	return &runDir{t: t, dir: t.TempDir()}
}

func (d *runDir) write(name string, lines []string, lastEnded bool) {
	d.t.Helper()
	s := strings.Join(lines, "\n")
	if lastEnded && len(lines) > 0 {
		s += "\n"
	}
	if err := os.WriteFile(filepath.Join(d.dir, name), []byte(s), 0o600); err != nil {
		d.t.Fatal(err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func completion(t *testing.T, i int, reason, worker string, tokens int) string {
	return mustJSON(t, dataset.CompletionLine{
		ID: "p" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), FinishReason: reason, Turns: 1,
		Usage: schema.Usage{PromptTokens: 10, CompletionTokens: tokens}, Worker: worker,
		TTFTMillis: int64(100 + i), LatencyMs: int64(1000 + 10*i), FinishedAt: t0.Add(time.Duration(10+i) * time.Second),
	})
}

func build(t *testing.T, opts report.Options) (*report.Report, string) {
	t.Helper()
	r, err := report.Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	return r, b.String()
}

// A garbage line in the middle of a file and a last line cut short are
// skipped, counted and named; the rest is reported.
func TestDamagedLinesAreSkipped(t *testing.T) {
	d := newRunDir(t)
	d.write(dataset.CompletionsFile, []string{
		completion(t, 0, "stop", "w1", 100),
		`{"id": "broken", "usage": {"completion_tokens": "many"}}`,
		"not json at all",
		completion(t, 1, "length", "w1", 300),
		completion(t, 2, "stop", "w2", 200)[:40],
	}, false)
	d.write(dataset.FailedFile, []string{`{"id":"f1","reason":"permanent","failed_at":"2026-12-01T10:00:20Z"}`, `{"id":`}, true)
	d.write(dataset.EventsFile, []string{"{", mustJSON(t, schema.Throughput{Time: t0, Phase: schema.PhaseRampUp, Total: 10, ETASec: 30})}, true)
	r, html := build(t, report.Options{Run: "damaged", Dir: d.dir})
	if r.Completed != 2 || r.Failed != 1 || r.Events != 1 {
		t.Errorf("read %d completions, %d failures, %d events; want 2, 1, 1", r.Completed, r.Failed, r.Events)
	}
	skipped := map[string]int{}
	for _, s := range r.Skipped {
		skipped[s.File] = s.Lines
	}
	want := map[string]int{dataset.CompletionsFile: 3, dataset.FailedFile: 1, dataset.EventsFile: 1}
	for f, n := range want {
		if skipped[f] != n {
			t.Errorf("%s: %d lines skipped, want %d (all: %v)", f, skipped[f], n, skipped)
		}
	}
	for _, s := range []string{"3 line(s) of completions.jsonl could not be read", "completions.jsonl:2:", "completions.jsonl:5: last line cut short",
		"the run is not finished", "the actual remaining time is not known yet"} {
		if !strings.Contains(html, s) {
			t.Errorf("report does not say %q", s)
		}
	}
}

// Nothing written by a run or its user reaches the page unescaped.
func TestHTMLEscaped(t *testing.T) {
	d := newRunDir(t)
	d.write(dataset.CompletionsFile, []string{completion(t, 0, "<script>alert(1)</script>", "<img src=x onerror=alert(2)>", 50)}, true)
	d.write(dataset.FailedFile, []string{`{"id":"f1","reason":"<script>alert(3)</script>","failed_at":"2026-12-01T10:00:20Z"}`}, true)
	m := &schema.Manifest{Run: "r", Model: "<script>alert(4)</script>", Total: 2, CreatedAt: t0}
	b, err := schema.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	d.write(dataset.ManifestFile, []string{string(b)}, true)
	_, html := build(t, report.Options{Run: "<script>alert(5)</script>", Dir: d.dir,
		Settings: []report.Setting{{Name: "<b>x</b>", Value: "<script>alert(6)</script>"}}})
	if strings.Contains(html, "<script") || strings.Contains(html, "<img") || strings.Contains(html, "<b>x") {
		t.Errorf("report holds markup from the data:\n%s", html)
	}
	if n := strings.Count(html, "&lt;script&gt;alert("); n < 6 {
		t.Errorf("%d escaped scripts on the page, want each of the 6 shown", n)
	}
}

// A run with no files says so rather than failing; a run without
// manifest.json says that.
func TestEmptyRun(t *testing.T) {
	d := newRunDir(t)
	r, html := build(t, report.Options{Run: "empty", Dir: d.dir})
	if r.Manifest != nil || r.Done || !r.Unknown {
		t.Errorf("empty run: manifest %v, done %v, unknown %v; want no manifest, not known to be done", r.Manifest, r.Done, r.Unknown)
	}
	for _, s := range []string{"No run manifest: manifest.json is absent", "whether the run is finished is unknown", "has an aggregator run for this run?", "no throughput events", "no answers"} {
		if !strings.Contains(html, s) {
			t.Errorf("empty run's report does not say %q", s)
		}
	}
	checkCharts(t, html)
}

// checkCharts checks that the page has every chart, once, and fetches
// nothing.
func checkCharts(t *testing.T, html string) {
	t.Helper()
	for _, id := range []string{report.ChartRequests, report.ChartTokens, report.ChartLengths, report.ChartTTFT,
		report.ChartLatency, report.ChartWorkers, report.ChartETA} {
		if n := strings.Count(html, `<svg id="`+id+`"`); n != 1 {
			t.Errorf("chart %s appears %d times, want once", id, n)
		}
	}
	if m := regexp.MustCompile(`(?i)(src|href)\s*=|url\(|<script|<link|@import|https?://`).FindString(html); m != "" {
		t.Errorf("report refers outside itself: %q", m)
	}
}

// The charts draw what the files hold: a done run's ETA against the
// truth, lengths by finish reason, each worker.
func TestChartsFromFixedData(t *testing.T) {
	d := newRunDir(t)
	var lines []string
	for i := range 30 {
		reason, worker := "stop", "w1"
		if i%3 == 0 {
			reason = "length"
		}
		if i%2 == 0 {
			worker = "w2"
		}
		lines = append(lines, completion(t, i, reason, worker, 50*i))
	}
	d.write(dataset.CompletionsFile, lines, true)
	var evs []string
	for i := range 8 {
		e := schema.Throughput{Time: t0.Add(time.Duration(5*i) * time.Second), Phase: schema.PhaseSteady, Total: 30,
			RequestsPerSec: float64(i), TokensPerSec: float64(100 * i), ETASec: float64(40 - 5*i),
			ETALowSec: float64(30 - 5*i), ETAHighSec: float64(50 - 5*i)}
		switch i {
		case 3: // a band that misses the truth (24 s)
			e.ETALowSec, e.ETAHighSec = 1, 2
		case 7:
			e.Phase, e.ETASec, e.ETALowSec, e.ETAHighSec = schema.PhaseDone, 0, 0, 0
		}
		evs = append(evs, mustJSON(t, e))
	}
	d.write(dataset.EventsFile, evs, true)
	r, html := build(t, report.Options{Run: "fixed", Dir: d.dir})
	if !r.Done || r.Completed != 30 {
		t.Fatalf("done %v, completed %d; want a done run of 30", r.Done, r.Completed)
	}
	checkCharts(t, html)
	for _, s := range []string{"actual remaining", "uncertainty band", "predicted ETA", ">stop<", ">length<",
		"15 (50.0%)", "The band held the truth at 6 of 7 events (86%).", "30 (10 truncated at max_tokens)", "p50 114 ms", "w1", "w2"} {
		if !strings.Contains(html, s) {
			t.Errorf("report does not show %q", s)
		}
	}
	if strings.Contains(html, "not finished") {
		t.Error("a done run is reported as not finished")
	}
}
