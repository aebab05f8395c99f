package producer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// 1,000 prompts are stored once each, with their headers, decodable, with
// the manifest and the workers' consumer in place; producing again stores
// nothing.
func TestRunPublishesEveryPromptOnce(t *testing.T) {
	e := setup(t)
	const n = 1000
	cfg := e.config(e.file(t, "prompts.jsonl", promptLines(0, n)))
	temp := 0.6
	cfg.Params = schema.Params{MaxTokens: 4096, Temperature: &temp}
	progress := &logtest.Buffer{}
	cfg.Progress = progress

	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != n || rep.Valid != n || rep.Invalid != 0 || rep.Published != n || rep.AlreadyQueued != 0 || rep.Failed != 0 || len(rep.Problems) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if got := storedPrompts(t, e.js); got != n {
		t.Fatalf("stream holds %d prompts, want %d", got, n)
	}

	seen := map[string]bool{}
	for _, m := range fetchPrompts(t, e.js, cfg.Run, n) {
		h := m.Headers()
		id := h.Get(schema.HeaderPromptID)
		if m.Subject() != schema.PromptSubject(cfg.Run, schema.Unit{ID: id}) {
			t.Fatalf("prompt %q on subject %s", id, m.Subject())
		}
		for name, want := range map[string]string{
			schema.HeaderMsgID:       schema.MsgID(cfg.Run, schema.Unit{ID: id}),
			schema.HeaderRun:         cfg.Run,
			schema.HeaderSchema:      schema.SchemaHeader(schema.KindPrompt),
			schema.HeaderContentType: schema.ContentTypeMsgpack,
		} {
			if got := h.Get(name); got != want {
				t.Fatalf("prompt %q: header %s = %q, want %q", id, name, got, want)
			}
		}
		p, err := schema.DecodePrompt(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		num, err := strconv.Atoi(strings.TrimPrefix(id, "p-"))
		if err != nil {
			t.Fatalf("unexpected id %q", id)
		}
		want := []schema.Message{system("be brief"), user(fmt.Sprintf("question %d", num))}
		if p.ID != id || p.Run != cfg.Run || !sameMessages(p.Messages, want) || p.Source != fmt.Sprintf("prompts.jsonl:%d", num+1) {
			t.Fatalf("prompt %q decodes to %+v", id, p)
		}
		seen[id] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct prompts, want %d", len(seen), n)
	}

	m := storedManifest(t, e.js, cfg.Run)
	if m == nil || m.Model != "m" || m.Total != n || m.Params.MaxTokens != 4096 || m.Params.Temperature == nil || *m.Params.Temperature != 0.6 ||
		m.Source != "prompts.jsonl" || m.Producer == "" || m.CreatedAt.IsZero() {
		t.Fatalf("manifest %+v", m)
	}
	cons, err := e.js.Consumer(ctxFor(t), schema.PromptsStream, schema.WorkersConsumer(cfg.Run))
	if err != nil {
		t.Fatalf("workers' consumer: %v", err)
	}
	if got := cons.CachedInfo().NumPending; got != n {
		t.Errorf("workers' consumer has %d pending, want %d", got, n)
	}
	if out := progress.String(); !strings.Contains(out, fmt.Sprintf("%d/%d prompts queued (100%%; %d new, 0 already queued)", n, n, n)) {
		t.Errorf("progress output lacks the final count:\n%s", out)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "produce finished") || !strings.Contains(logs, "published=1000") {
		t.Errorf("no summary log line:\n%s", logs)
	}

	// Again: everything is recognised, nothing is stored.
	cfg.Progress = nil
	rep, err = Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != 0 || rep.AlreadyQueued != n || rep.Failed != 0 {
		t.Fatalf("second produce: %+v", rep)
	}
	if got := storedPrompts(t, e.js); got != n {
		t.Fatalf("after the second produce the stream holds %d prompts, want %d", got, n)
	}
}

// A produce that died half way (simulated by publishing the first half
// directly, half of that without a message id, as if the de-duplication
// window had passed) is completed by producing again: exactly the missing
// prompts are stored.
func TestRunAfterCrashPublishesTheRest(t *testing.T) {
	e := setup(t)
	const n = 1000
	lines := promptLines(0, n)
	cfg := e.config(e.file(t, "prompts.jsonl", lines))
	ctx := ctxFor(t)
	if err := provision.Streams(ctx, e.js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	for i, l := range lines[:n/2] {
		id, msgs, err := dataset.ParseLine([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		m, err := promptMessage(&schema.Prompt{Run: cfg.Run, Source: fmt.Sprintf("prompts.jsonl:%d", i+1), ID: id, Messages: msgs}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if i >= n/4 {
			m.Header.Del(schema.HeaderMsgID)
		}
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	rep, err := Run(ctx, e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != n/2 || rep.AlreadyQueued != n/2 || rep.Failed != 0 {
		t.Fatalf("report %+v, want %d published and %d already queued", rep, n/2, n/2)
	}
	if got := storedPrompts(t, e.js); got != n {
		t.Fatalf("stream holds %d prompts, want %d", got, n)
	}
}

// A produce interrupted while publishing (its context cancelled after 400
// publishes) and then run again ends with every prompt stored once.
func TestInterruptedRunResumes(t *testing.T) {
	e := setup(t)
	const n = 1000
	cfg := e.config(e.file(t, "prompts.jsonl", promptLines(0, n)))
	cfg.alone = true // interrupted after a number of single publishes
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	js := newFaultyJS(e.js, func(_ string, _, calls int) fault {
		if calls == 400 {
			cancel()
		}
		return noFault
	})

	rep, err := Run(ctx, js, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted produce returned %v, want context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "produce again") {
		t.Errorf("error does not say what to do: %v", err)
	}
	// Publishes sent before the interruption may still be on their way:
	// wait for their acknowledgements before counting.
	select {
	case <-e.js.PublishAsyncComplete():
	case <-ctxFor(t).Done():
		t.Fatal("publishes sent before the interruption were never acknowledged")
	}
	stored := int(storedPrompts(t, e.js))
	if stored == 0 || stored >= n || rep.Published > stored {
		t.Fatalf("after the interruption %d prompts are stored and %d reported published", stored, rep.Published)
	}

	cfg.alone = false // resumed in batches
	rep, err = Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != n-stored || rep.AlreadyQueued != stored {
		t.Fatalf("second produce published %d and found %d; want %d and %d", rep.Published, rep.AlreadyQueued, n-stored, stored)
	}
	if got := storedPrompts(t, e.js); got != n {
		t.Fatalf("stream holds %d prompts, want %d", got, n)
	}
}

var mixedLines = []string{
	`{"id":"a","prompt":"one"}`,
	`not json`,
	`{"id":"b","prompt":"two"}`,
	``,
	`{"id":"x"}`,
	`{"id":"c","messages":[{"role":"user","content":"three"}]}`,
}

// A bad line stops everything: the error lists FILE:LINE: reason, no
// stream is written and no manifest exists.
func TestInvalidLinesPublishNothing(t *testing.T) {
	e := setup(t)
	cfg := e.config(e.file(t, "mixed.jsonl", mixedLines))

	for name, produce := range map[string]func() (*Report, error){
		"Validate": func() (*Report, error) { return Validate(ctxFor(t), cfg) },
		"Run":      func() (*Report, error) { return Run(ctxFor(t), e.js, cfg) },
	} {
		rep, err := produce()
		var inv *InvalidError
		if !errors.As(err, &inv) {
			t.Fatalf("%s: error %v, want an InvalidError", name, err)
		}
		if rep.Lines != 6 || rep.Valid != 3 || rep.Invalid != 2 || inv.Invalid != 2 || len(rep.Problems) != 2 {
			t.Fatalf("%s: report %+v", name, rep)
		}
		msg := err.Error()
		for _, want := range []string{
			cfg.PromptsFile + ":2: not JSON: invalid character 'o' in literal null",
			cfg.PromptsFile + ":5: no messages, conversations or prompt field",
			"nothing was published",
			"--skip-invalid",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: error lacks %q:\n%s", name, want, msg)
			}
		}
		if p := rep.Problems[0]; p.Line != 2 || p.String() != cfg.PromptsFile+":2: "+p.Reason {
			t.Errorf("%s: problem %+v prints as %s", name, p, p)
		}
	}
	if got := storedPrompts(t, e.js); got != 0 {
		t.Fatalf("stream holds %d prompts, want none", got)
	}
	if m := storedManifest(t, e.js, cfg.Run); m != nil {
		t.Fatalf("a manifest was written: %+v", m)
	}
}

func TestErrorListsTwentyProblems(t *testing.T) {
	t.Parallel()
	var lines []string
	for range 25 {
		lines = append(lines, `{"prompt":""}`)
	}
	e := &testEnv{logs: &logtest.Buffer{}, dir: t.TempDir()}
	cfg := e.config(e.file(t, "bad.jsonl", lines))
	_, err := Validate(ctxFor(t), cfg)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if got := strings.Count(msg, cfg.PromptsFile+":"); got != 20 {
		t.Errorf("error lists %d problems, want 20:\n%s", got, msg)
	}
	if !strings.Contains(msg, cfg.PromptsFile+":20: prompt is empty") || !strings.Contains(msg, "... and 5 more") {
		t.Errorf("error:\n%s", msg)
	}
}

func TestSkipInvalidPublishesTheValidLines(t *testing.T) {
	e := setup(t)
	cfg := e.config(e.file(t, "mixed.jsonl", mixedLines))
	cfg.SkipInvalid = true
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Valid != 3 || rep.Invalid != 2 || rep.Published != 3 || len(rep.Problems) != 2 {
		t.Fatalf("report %+v", rep)
	}
	if got := storedPrompts(t, e.js); got != 3 {
		t.Fatalf("stream holds %d prompts, want 3", got)
	}
	if m := storedManifest(t, e.js, cfg.Run); m == nil || m.Total != 3 {
		t.Fatalf("manifest %+v, want a total of 3", m)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "skipping invalid line") || !strings.Contains(logs, "mixed.jsonl:2: not JSON") {
		t.Errorf("skipped lines not logged:\n%s", logs)
	}
}

func TestDuplicatesAreDetected(t *testing.T) {
	e := setup(t)
	cfg := e.config(e.file(t, "dups.jsonl", []string{
		`{"id":"a","prompt":"one"}`,
		`{"id":"b","prompt":"two"}`,
		`{"id":"a","prompt":"three"}`,
		`{"prompt":"same"}`,
		`{"messages":[{"role":"user","content":"same"},{"role":"assistant","content":"old answer"}]}`,
		`{"id":7,"prompt":"seven"}`,
		`{"id":"7","prompt":"seven again"}`,
	}))
	_, err := Validate(ctxFor(t), cfg)
	for _, want := range []string{
		`dups.jsonl:3: duplicate id "a" (first on line 1)`,
		`dups.jsonl:5: same content as line 4`,
		`dups.jsonl:7: duplicate id "7" (first on line 6)`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}

	cfg.SkipInvalid = true
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Valid != 4 || rep.Invalid != 3 || rep.Published != 4 {
		t.Fatalf("report %+v", rep)
	}
	msgs := fetchPrompts(t, e.js, cfg.Run, 4)
	for _, m := range msgs {
		p, err := schema.DecodePrompt(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		if p.ID == "a" && p.Messages[0].Content != "one" {
			t.Errorf("id a holds %q, want the first line's prompt", p.Messages[0].Content)
		}
	}
}

func TestManifestConflict(t *testing.T) {
	e := setup(t)
	file := e.file(t, "ten.jsonl", promptLines(0, 10))
	cfg := e.config(file)
	temp := 0.6
	cfg.Params.Temperature = &temp
	if _, err := Run(ctxFor(t), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	again, err := Run(ctxFor(t), e.js, cfg)
	if err != nil || again.AlreadyQueued != 10 {
		t.Fatalf("identical repeat: %+v, %v", again, err)
	}

	other := cfg
	other.Model = "other"
	hotter := 0.7
	other.Params.Temperature = &hotter
	_, err = Run(ctxFor(t), e.js, other)
	var conflict *ManifestConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("different model: %v, want a ManifestConflictError", err)
	}
	for _, want := range []string{
		`model is "m" in the stored manifest, "other" now`,
		"temperature is 0.6 in the stored manifest, 0.7 now",
		"use a new --run name to change parameters",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}

	// With more prompts as well, both are said.
	other.PromptsFile = e.file(t, "eleven.jsonl", promptLines(0, 11))
	_, err = Run(ctxFor(t), e.js, other)
	if !errors.As(err, &conflict) || !strings.Contains(err.Error(), "prompt count is 10 in the stored manifest (from ten.jsonl), 11 valid prompts now (from eleven.jsonl)") {
		t.Fatalf("different model and prompt count: %v", err)
	}

	// More prompts under the same run: refused, naming the new ones, and
	// none of them is published.
	bigger := cfg
	bigger.PromptsFile = e.file(t, "twelve.jsonl", promptLines(0, 12))
	_, err = Run(ctxFor(t), e.js, bigger)
	var prompts *PromptsConflictError
	if !errors.As(err, &prompts) || !strings.Contains(err.Error(), "the run has 10 prompts (from ten.jsonl), "+bigger.PromptsFile+" has 12 valid prompts") ||
		!strings.Contains(err.Error(), `2 ids of the file are not queued in the run: "p-00010", "p-00011"`) {
		t.Fatalf("different prompt count: %v", err)
	}
	if got := storedPrompts(t, e.js); got != 10 {
		t.Fatalf("stream holds %d prompts after a refused produce, want 10", got)
	}

	bigger.Run = "r2"
	rep, err := Run(ctxFor(t), e.js, bigger)
	if err != nil || rep.Published != 12 {
		t.Fatalf("new run: %+v, %v", rep, err)
	}
}

// A prompt of several MiB (one line, longer than any read buffer) is
// published whole.
func TestLongLine(t *testing.T) {
	e := setup(t)
	long := strings.Repeat("long context ", 5<<20/13)
	lines := append(promptLines(0, 3), fmt.Sprintf(`{"id":"long","prompt":%q}`, long))
	cfg := e.config(e.file(t, "long.jsonl", lines))
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Published != 4 {
		t.Fatalf("report %+v", rep)
	}
	for _, m := range fetchPrompts(t, e.js, cfg.Run, 4) {
		if m.Headers().Get(schema.HeaderPromptID) != "long" {
			continue
		}
		p, err := schema.DecodePrompt(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		if p.Messages[0].Content != long {
			t.Fatalf("long prompt came back with %d bytes, want %d", len(p.Messages[0].Content), len(long))
		}
		return
	}
	t.Fatal("long prompt not found")
}

func TestEmptyAndMissingFiles(t *testing.T) {
	e := setup(t)
	cfg := e.config(e.file(t, "blank.jsonl", []string{"", "  "}))
	if _, err := Run(ctxFor(t), e.js, cfg); err == nil || !strings.Contains(err.Error(), "has no valid prompt") {
		t.Errorf("blank file: %v", err)
	}
	cfg.PromptsFile = e.dir + "/missing.jsonl"
	if _, err := Run(ctxFor(t), e.js, cfg); err == nil || !strings.Contains(err.Error(), "open prompts file") {
		t.Errorf("missing file: %v", err)
	}
	if got := storedPrompts(t, e.js); got != 0 {
		t.Errorf("stream holds %d prompts", got)
	}
}

// A file that changes between the two passes is detected, not published
// from half-old, half-new lines.
func TestFileChangedBetweenPasses(t *testing.T) {
	e := setup(t)
	cfg := e.config(e.file(t, "p.jsonl", promptLines(0, 5))).withDefaults()
	ctx := ctxFor(t)
	sc, err := scanFile(ctx, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := provision.Streams(ctx, e.js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(e.js, cfg, nil, 0, nil)
	pub.start(ctx)
	changed := strings.Join(append(promptLines(0, 2), promptLines(10, 3)...), "\n")
	err = feed(ctx, cfg, sc, openReader(t, e.file(t, "changed.jsonl", strings.Split(changed, "\n"))), pub.add)
	pub.finish(ctx)
	if err == nil || !strings.Contains(err.Error(), "changed while it was being produced") {
		t.Fatalf("changed file: %v", err)
	}

	// The same ids with other content: what is published must be what the
	// manifest's digest covers.
	edited := promptLines(0, 5)
	edited[3] = strings.Replace(edited[3], "question 3", "question 3, edited", 1)
	pub = newPublisher(e.js, cfg, nil, 0, nil)
	pub.start(ctx)
	err = feed(ctx, cfg, sc, openReader(t, e.file(t, "edited.jsonl", edited)), pub.add)
	pub.finish(ctx)
	if err == nil || !strings.Contains(err.Error(), `the prompt "p-00003" on line 4 is not the one validated`) {
		t.Fatalf("edited line: %v", err)
	}
}

func TestClassify(t *testing.T) {
	api := func(code int, desc string) error {
		return fmt.Errorf("publish: %w", &jetstream.APIError{Code: 400, ErrorCode: jetstream.ErrorCode(code), Description: desc})
	}
	for _, tc := range []struct {
		name string
		ack  *jetstream.PubAck
		err  error
		want verdict
	}{
		{"stored", &jetstream.PubAck{Sequence: 3}, nil, stored},
		{"duplicate ack", &jetstream.PubAck{Sequence: 3, Duplicate: true}, nil, alreadyThere},
		{"wrong last sequence", nil, api(10071, "wrong last sequence: 5"), alreadyThere},
		{"max messages per subject", nil, api(10077, "maximum messages per subject exceeded"), alreadyThere},
		{"subject in flight in a cluster", nil, api(10164, "wrong last sequence"), retry},
		{"other store failure", nil, api(10077, "insufficient resources"), retry},
		{"server says too large", nil, api(10054, "message size exceeds maximum allowed"), permanent},
		{"client says too large", nil, fmt.Errorf("x: %w", nats.ErrMaxPayload), permanent},
		{"connection closed", nil, nats.ErrConnectionClosed, permanent},
		{"cancelled", nil, context.Canceled, permanent},
		{"no stream response", nil, jetstream.ErrNoStreamResponse, retry},
		{"ack timeout", nil, &ackTimeoutError{time.Second}, retry},
		{"anything else", nil, errors.New("boom"), retry},
	} {
		if got := classify(tc.ack, tc.err); got != tc.want {
			t.Errorf("%s: classify = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int][2]float64{1: {0.125, 0.25}, 2: {0.25, 0.5}, 3: {0.5, 1}, 6: {2.5, 5}, 40: {2.5, 5}} {
		for range 100 {
			if d := backoff(n).Seconds(); d < want[0] || d > want[1] {
				t.Fatalf("backoff(%d) = %vs, want %v..%v", n, d, want[0], want[1])
			}
		}
	}
}

// openReader opens path as a prompts file, closed when t ends.
func openReader(t *testing.T, path string) *dataset.Reader {
	t.Helper()
	rd, err := dataset.Open(path, dataset.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return rd
}
