package producer

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/schema"
)

func ptr[T any](v T) *T { return &v }

func TestConfigValidateNewSettings(t *testing.T) {
	ok := Config{Run: "r1", PromptsFile: "p.jsonl", Model: "m"}
	for _, c := range []Config{
		{Turns: schema.TurnsLast, ContextReasoning: schema.ContextReasoningDrop, Samples: 1},
		{Turns: schema.TurnsAll, ContextReasoning: schema.ContextReasoningKeep, Samples: MaxSamples, ReturnTokenIDs: true},
	} {
		c.Run, c.PromptsFile, c.Model = ok.Run, ok.PromptsFile, ok.Model
		if err := c.Validate(); err != nil {
			t.Errorf("%+v refused: %v", c, err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"unknown turns", func(c *Config) { c.Turns = "first" }, `turns "first": use last`},
		{"unknown context reasoning", func(c *Config) { c.Turns = schema.TurnsAll; c.ContextReasoning = "some" }, `context reasoning "some"`},
		{"keep with last", func(c *Config) { c.ContextReasoning = schema.ContextReasoningKeep }, "applies only to turns all"},
		{"negative samples", func(c *Config) { c.Samples = -1 }, "samples is -1"},
		{"too many samples", func(c *Config) { c.Samples = MaxSamples + 1 }, "samples is 1001"},
		{"top_k", func(c *Config) { c.Params.TopK = ptr(-2) }, "top_k is -2"},
		{"extra body reserved", func(c *Config) { c.Params.ExtraBody = json.RawMessage(`{"n":2}`) }, `extra body sets "n"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.change(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error about %s", err, tc.want)
			}
		})
	}
}

// The digest covers a line's params, and only when it has some: a prompt
// without params keeps the digest it always had.
func TestPromptDigestCoversParams(t *testing.T) {
	base := &schema.Prompt{ID: "a", Messages: []schema.Message{user("hello")}}
	if promptDigest(base) != promptDigest(&schema.Prompt{ID: "a", Messages: []schema.Message{user("hello")}, Params: nil}) {
		t.Fatal("nil params change the digest")
	}
	seen := map[[16]byte]string{promptDigest(base): "none"}
	for _, p := range []*schema.Params{
		{},
		{Temperature: ptr(0.5)},
		{Temperature: ptr(0.6)},
		{TopK: ptr(5)},
		{Seed: ptr(int64(5))},
		{Stop: []string{"a"}},
		{Stop: []string{"a", "b"}},
		{ChatTemplateKwargs: json.RawMessage(`{"a":1}`)},
		{ExtraBody: json.RawMessage(`{"a":1}`)},
	} {
		d := promptDigest(&schema.Prompt{ID: "a", Messages: []schema.Message{user("hello")}, Params: p})
		if other, ok := seen[d]; ok {
			t.Errorf("params %s have the digest of %s", paramsBytes(p), other)
		}
		seen[d] = paramsBytes(p)
	}
}

// Editing a line's params is editing the prompt: the run refuses it and
// names the prompt.
func TestChangedParamsAreRefused(t *testing.T) {
	e := setup(t)
	lines := promptLines(0, 5)
	lines[2] = `{"id":"p-00002","prompt":"q","params":{"temperature":0.2}}`
	cfg := e.config(e.file(t, "a.jsonl", lines))
	if rep, err := Run(ctxFor(t), e.js, cfg); err != nil || rep.Published != 5 {
		t.Fatalf("first produce: %+v, %v", rep, err)
	}
	p := storedPrompt(t, e.js, cfg.Run, "p-00002")
	if p.Params == nil || p.Params.Temperature == nil || *p.Params.Temperature != 0.2 {
		t.Fatalf("queued params %+v", p.Params)
	}
	if p := storedPrompt(t, e.js, cfg.Run, "p-00001"); p.Params != nil {
		t.Fatalf("a line without params queued params %+v", p.Params)
	}
	if rep, err := Run(ctxFor(t), e.js, cfg); err != nil || rep.AlreadyQueued != 5 {
		t.Fatalf("the same file again: %+v, %v", rep, err)
	}
	for _, edit := range []string{
		`{"id":"p-00002","prompt":"q","params":{"temperature":0.3}}`,
		`{"id":"p-00002","prompt":"q"}`,
		`{"id":"p-00002","prompt":"q","params":{"temperature":0.2,"top_k":4}}`,
	} {
		edited := slices.Clone(lines)
		edited[2] = edit
		cfg.PromptsFile = e.file(t, "edited.jsonl", edited)
		seq := lastSeq(t, e.js)
		_, err := Run(ctxFor(t), e.js, cfg)
		var conflict *PromptsConflictError
		if !errors.As(err, &conflict) || !slices.Equal(conflict.Changed, []string{"p-00002"}) {
			t.Fatalf("%s: %v, want the prompt named as changed", edit, err)
		}
		if lastSeq(t, e.js) != seq {
			t.Fatalf("%s: published after a refusal", edit)
		}
	}
}

// A run exists with its settings: producing it again with any of them
// changed is refused, naming the difference, and publishes nothing.
func TestManifestConflictNewSettings(t *testing.T) {
	e := setup(t)
	lines := []string{
		`{"id":"a","messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"x"},{"role":"user","content":"q2"}]}`,
		`{"id":"b","prompt":"q"}`,
	}
	base := e.config(e.file(t, "a.jsonl", lines))
	base.Turns = schema.TurnsAll
	base.Samples = 2
	base.Params = schema.Params{TopK: ptr(20), Stop: []string{"END"}, ChatTemplateKwargs: json.RawMessage(`{"thinking":true}`),
		ExtraBody: json.RawMessage(`{"x":1}`), Seed: ptr(int64(1)), MinP: ptr(0.1), ReasoningEffort: "low",
		PresencePenalty: ptr(0.1), FrequencyPenalty: ptr(0.2), RepetitionPenalty: ptr(1.1)}
	if _, err := Run(ctxFor(t), e.js, base); err != nil {
		t.Fatal(err)
	}
	if rep, err := Run(ctxFor(t), e.js, base); err != nil || rep.AlreadyQueued != 4 {
		t.Fatalf("identical repeat: %+v, %v", rep, err)
	}
	seq := lastSeq(t, e.js)
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Turns = schema.TurnsLast }, "turns is all in the stored manifest, last now"},
		{func(c *Config) { c.ContextReasoning = schema.ContextReasoningKeep }, "context_reasoning is drop in the stored manifest, keep now"},
		{func(c *Config) { c.Samples = 3 }, "samples is 2 in the stored manifest, 3 now"},
		{func(c *Config) { c.ReturnTokenIDs = true }, "return_token_ids is false in the stored manifest, true now"},
		{func(c *Config) { c.Params.TopK = nil }, "top_k is 20 in the stored manifest, unset now"},
		{func(c *Config) { c.Params.MinP = ptr(0.2) }, "min_p is 0.1 in the stored manifest, 0.2 now"},
		{func(c *Config) { c.Params.PresencePenalty = nil }, "presence_penalty is 0.1"},
		{func(c *Config) { c.Params.FrequencyPenalty = nil }, "frequency_penalty is 0.2"},
		{func(c *Config) { c.Params.RepetitionPenalty = nil }, "repetition_penalty is 1.1"},
		{func(c *Config) { c.Params.Seed = ptr(int64(2)) }, "seed is 1 in the stored manifest, 2 now"},
		{func(c *Config) { c.Params.Stop = []string{"END", "STOP"} }, `stop is ["END"] in the stored manifest, ["END", "STOP"] now`},
		{func(c *Config) { c.Params.ReasoningEffort = "high" }, `reasoning_effort is "low" in the stored manifest, "high" now`},
		{func(c *Config) { c.Params.ChatTemplateKwargs = json.RawMessage(`{"thinking":false}`) }, `chat_template_kwargs is {"thinking":true} in the stored manifest, {"thinking":false} now`},
		{func(c *Config) { c.Params.ExtraBody = nil }, `extra_body is {"x":1} in the stored manifest, unset now`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			cfg := base
			tc.change(&cfg)
			_, err := Run(ctxFor(t), e.js, cfg)
			var conflict *ManifestConflictError
			if !errors.As(err, &conflict) || !strings.Contains(conflict.Differences[0], tc.want) {
				t.Fatalf("%v, want a ManifestConflictError about %q", err, tc.want)
			}
			// The other settings are the same; only the prompts may differ
			// (turns last queues the assistant turns' text).
			for _, d := range conflict.Differences[1:] {
				if !strings.Contains(d, "the prompts differ too") {
					t.Fatalf("more differences than one: %v", err)
				}
			}
		})
	}
	if lastSeq(t, e.js) != seq {
		t.Fatal("a refused produce published")
	}
}

// A manifest written before turns, samples and prompts were recorded is
// the same run as a produce with their defaults: it resumes.
func TestOldManifestResumes(t *testing.T) {
	e := setup(t)
	const n = 6
	cfg := e.config(e.file(t, "a.jsonl", promptLines(0, n)))
	if _, err := Run(ctxFor(t), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	m := storedManifest(t, e.js, cfg.Run)
	if m.Turns != schema.TurnsLast || m.Samples != 1 || m.Prompts != n || m.Total != n || m.TotalTurns != n || m.ContextReasoning != "" || m.ReturnTokenIDs {
		t.Fatalf("manifest %+v", m)
	}
	m.Turns, m.Samples, m.Prompts, m.TotalTurns = "", 0, 0, 0
	b, err := schema.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := e.js.KeyValue(ctxFor(t), schema.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctxFor(t), cfg.Run, b); err != nil {
		t.Fatal(err)
	}
	cfg.Turns, cfg.ContextReasoning, cfg.Samples = schema.TurnsLast, schema.ContextReasoningDrop, 1
	if rep, err := Run(ctxFor(t), e.js, cfg); err != nil || rep.AlreadyQueued != n {
		t.Fatalf("%+v, %v", rep, err)
	}
}

// With samples, every prompt is queued once, its samples in one message
// (answered in one request), each still its own unit; producing again
// publishes nothing.
func TestSamplesPublishEveryUnitOnce(t *testing.T) {
	e := setup(t)
	const n, samples = 20, 3
	lines := promptLines(0, n)
	lines[4] = `{"id":"p-00004","prompt":"q","params":{"seed":40}}`
	cfg := e.config(e.file(t, "a.jsonl", lines))
	cfg.Samples = samples
	cfg.Params.Seed = ptr(int64(1))
	progress := &logtest.Buffer{}
	cfg.Progress = progress
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Valid != n || rep.Samples != samples || rep.Units != n*samples || rep.Turns != n*samples || rep.Published != n*samples || rep.AlreadyQueued != 0 {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(progress.String(), fmt.Sprintf("%d/%d samples queued", n*samples, n*samples)) {
		t.Errorf("progress:\n%s", progress)
	}
	if got := storedPrompts(t, e.js); got != n {
		t.Fatalf("stream holds %d messages, want %d", got, n)
	}
	units := map[string]bool{}
	for _, m := range fetchPrompts(t, e.js, cfg.Run, n) {
		p, err := schema.DecodePrompt(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		u := p.Unit()
		h := m.Headers()
		if m.Subject() != schema.PromptSubject(cfg.Run, u) || h.Get(schema.HeaderMsgID) != schema.MsgID(cfg.Run, u) || h.Get(schema.HeaderPromptID) != p.ID {
			t.Fatalf("unit %+v on %s with headers %v", u, m.Subject(), h)
		}
		if u.Sample != 0 || p.Samples != samples || h.Get(schema.HeaderSample) != "" {
			t.Fatalf("message of %+v asks for %d samples, sample header %q: want samples 0 to %d", u, p.Samples, h.Get(schema.HeaderSample), samples-1)
		}
		if (p.ID == "p-00004") != (p.Params != nil) || (p.Params != nil && *p.Params.Seed != 40) {
			t.Fatalf("unit %+v params %+v", u, p.Params)
		}
		for k := range p.SampleCount() {
			units[p.Sampled(k).Unit().Key()] = true
		}
	}
	if len(units) != n*samples {
		t.Fatalf("%d distinct units, want %d", len(units), n*samples)
	}
	m := storedManifest(t, e.js, cfg.Run)
	if m.Samples != samples || m.SamplesPerMessage != samples || m.Prompts != n || m.Total != n*samples || m.TotalTurns != n*samples || m.Params.Seed == nil || *m.Params.Seed != 1 {
		t.Fatalf("manifest %+v", m)
	}

	again, err := Run(ctxFor(t), e.js, cfg)
	if err != nil || again.Published != 0 || again.AlreadyQueued != n*samples {
		t.Fatalf("again: %+v, %v", again, err)
	}
	if got := storedPrompts(t, e.js); got != n {
		t.Fatalf("stream holds %d messages after producing again, want %d", got, n)
	}
}

// An interrupted produce with samples resumes: the prompts missing are
// published with all their samples.
func TestSamplesResume(t *testing.T) {
	const n, samples = 10, 3
	e, _ := interruptedSamples(t, samples, func(i, k int) bool { return i < 5 && i%2 == 0 && k == 0 })
	if got := len(queuedUnits(t, e.js, "r1", n)); got != n*samples {
		t.Fatalf("%d units queued, want %d", got, n*samples)
	}
}

// A run produced when each sample was a message of its own goes on that
// way when produced again: the samples missing are published alone,
// whichever they are.
func TestSamplesResumeOneMessageEach(t *testing.T) {
	const n, samples = 10, 3
	e, _ := interruptedSamples(t, 1, func(i, k int) bool { return i < 5 && (i+k)%2 == 1 })
	if got := storedPromptsOf(t, e.js, "r1"); got != n*samples {
		t.Fatalf("run r1 has %d prompt messages, want one per sample, %d", got, n*samples)
	}
}

// interruptedSamples leaves run r1 of 10 prompts of 3 samples as an
// interrupted produce of perMessage samples a message left it (the
// prompt of line i and sample k queued where pick says so), produces it
// again, checks that what was missing, and only that, was published, and
// returns the environment and the configuration.
func interruptedSamples(t *testing.T, perMessage int, pick func(i, k int) bool) (*testEnv, Config) {
	t.Helper()
	const n, samples = 10, 3
	e := setup(t)
	cfg := e.config(e.file(t, "a.jsonl", promptLines(0, n)))
	cfg.Samples = samples
	ctx := ctxFor(t)
	cfg.Run = "ref"
	if _, err := Run(ctx, e.js, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Run = "r1"
	putManifest(t, e.js, storedManifest(t, e.js, "ref"), "r1", perMessage)
	published := publishSamples(t, e.js, cfg, pick, perMessage)
	rep, err := Run(ctx, e.js, cfg)
	if err != nil || rep.Published != n*samples-published || rep.AlreadyQueued != published {
		t.Fatalf("%+v, %v; want %d already queued", rep, err, published)
	}
	return e, cfg
}

// putManifest stores ref's manifest as run's, with perMessage samples in
// each prompt message.
func putManifest(t *testing.T, js jetstream.JetStream, ref *schema.Manifest, run string, perMessage int) {
	t.Helper()
	m := *ref
	m.Run, m.SamplesPerMessage = run, perMessage
	b, err := schema.EncodeManifest(&m)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctxFor(t), schema.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctxFor(t), run, b); err != nil {
		t.Fatal(err)
	}
}

// publishSamples publishes, for the prompt of line i and its sample k
// where pick says so, a message of perMessage samples from k, as an
// interrupted produce would have, and returns how many samples that is.
func publishSamples(t *testing.T, js jetstream.JetStream, cfg Config, pick func(i, k int) bool, perMessage int) int {
	t.Helper()
	ctx := ctxFor(t)
	lines := promptLines(0, 10)
	published := 0
	for i, line := range lines {
		l, err := dataset.ParseLineWith([]byte(line), dataset.ParseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := linePrompt(cfg.Run, fmt.Sprintf("a.jsonl:%d", i+1), l)
		for k := 0; k < cfg.samples(); k += perMessage {
			if !pick(i, k) {
				continue
			}
			p.Sample = k
			if perMessage > 1 {
				p.Samples = perMessage
			}
			m, err := promptMessage(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
			published += perMessage
		}
	}
	return published
}

// queuedUnits returns the units of run's n prompt messages.
func queuedUnits(t *testing.T, js jetstream.JetStream, run string, n int) map[string]bool {
	t.Helper()
	units := map[string]bool{}
	for _, m := range fetchPrompts(t, js, run, n) {
		p, err := schema.DecodePrompt(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		for k := range p.SampleCount() {
			units[p.Sampled(k).Unit().Key()] = true
		}
	}
	return units
}

// storedPromptsOf counts run's prompt messages.
func storedPromptsOf(t *testing.T, js jetstream.JetStream, run string) uint64 {
	t.Helper()
	s, err := js.Stream(ctxFor(t), schema.PromptsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctxFor(t), jetstream.WithSubjectFilter(schema.RunFilter(schema.PromptsRoot, run)))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// With samples, a file with other prompts is refused naming the ids that
// differ, not the other samples of the file's own prompts.
func TestSamplesPromptsConflict(t *testing.T) {
	e := setup(t)
	const n, samples = 10, 3
	lines := promptLines(0, n)
	cfg := e.config(e.file(t, "a.jsonl", lines))
	cfg.Samples = samples
	if _, err := Run(ctxFor(t), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	other := slices.Clone(lines[:n-1])
	other = append(other, promptLines(n, 1)...)
	cfg.PromptsFile = e.file(t, "b.jsonl", other)
	_, err := Run(ctxFor(t), e.js, cfg)
	var conflict *PromptsConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("%v, want a PromptsConflictError", err)
	}
	if conflict.NotInFileCount != samples || !slices.Equal(conflict.NotInFile, []string{"p-00009"}) ||
		conflict.NotQueuedCount != 1 || !slices.Equal(conflict.NotQueued, []string{"p-00010"}) || conflict.Common != n-1 {
		t.Fatalf("conflict %+v", conflict)
	}
	if !strings.Contains(err.Error(), `3 queued samples of the run are of ids not in the file: "p-00009"`) {
		t.Errorf("error: %v", err)
	}
}

// With --turns all the assistant turns are queued as empty placeholders
// and the manifest counts every turn.
func TestTurnsAllProduce(t *testing.T) {
	e := setup(t)
	lines := []string{
		`{"id":"a","messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"old answer"},{"role":"user","content":"q2"},{"role":"assistant","content":"last"}]}`,
		`{"id":"b","prompt":"q"}`,
		`{"id":"c","conversations":[{"from":"human","value":"q1"},{"from":"gpt","value":"a1"},{"from":"human","value":"q2"},{"from":"gpt","value":"a2"},{"from":"human","value":"q3"}]}`,
	}
	cfg := e.config(e.file(t, "a.jsonl", lines))
	cfg.Turns = schema.TurnsAll
	cfg.ContextReasoning = schema.ContextReasoningKeep
	cfg.Samples = 2
	cfg.ReturnTokenIDs = true
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil || rep.Units != 6 || rep.Turns != (2+1+3)*2 || rep.Published != 6 {
		t.Fatalf("%+v, %v", rep, err)
	}
	m := storedManifest(t, e.js, cfg.Run)
	if m.Turns != schema.TurnsAll || m.ContextReasoning != schema.ContextReasoningKeep || m.Samples != 2 || !m.ReturnTokenIDs ||
		m.Prompts != 3 || m.Total != 6 || m.TotalTurns != 12 {
		t.Fatalf("manifest %+v", m)
	}
	p := storedPrompt(t, e.js, cfg.Run, "a")
	want := []schema.Message{user("q1"), {Role: "assistant"}, user("q2")}
	if !sameMessages(p.Messages, want) {
		t.Fatalf("queued %+v, want %+v", p.Messages, want)
	}
	// The same file read with --turns last is another run.
	cfg.Turns, cfg.ContextReasoning = schema.TurnsLast, ""
	var conflict *ManifestConflictError
	if _, err := Run(ctxFor(t), e.js, cfg); !errors.As(err, &conflict) {
		t.Fatalf("%v, want a ManifestConflictError", err)
	}
}

// A schedule given when a run is first produced is stored in its
// manifest; producing the run again with another keeps the stored one
// and says so.
func TestScheduleIsStoredOnce(t *testing.T) {
	e := setup(t)
	cfg := e.config(e.file(t, "a.jsonl", promptLines(0, 4)))
	cfg.Schedule = &schema.Schedule{Priority: 3, Weight: 2}
	if _, err := Run(ctxFor(t), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	if m := storedManifest(t, e.js, cfg.Run); m.Schedule != (schema.Schedule{Priority: 3, Weight: 2}) {
		t.Fatalf("stored schedule %+v", m.Schedule)
	}
	var logs strings.Builder
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Schedule = &schema.Schedule{Priority: 9}
	if rep, err := Run(ctxFor(t), e.js, cfg); err != nil || rep.AlreadyQueued != 4 {
		t.Fatalf("%+v, %v", rep, err)
	}
	if m := storedManifest(t, e.js, cfg.Run); m.Schedule != (schema.Schedule{Priority: 3, Weight: 2}) {
		t.Errorf("schedule after producing again: %+v, want the stored one kept", m.Schedule)
	}
	if !strings.Contains(logs.String(), "aerie runs set") {
		t.Errorf("producing again with another schedule does not say how to change it:\n%s", logs.String())
	}
}
