package producer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// storedPrompt reads back the prompt queued for id in run.
func storedPrompt(t testing.TB, js jetstream.JetStream, run, id string) *schema.Prompt {
	t.Helper()
	ctx := ctxFor(t)
	s, err := js.Stream(ctx, schema.PromptsStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, schema.PromptSubject(run, schema.Unit{ID: id}))
	if err != nil {
		t.Fatalf("read back prompt %q: %v", id, err)
	}
	p, err := schema.DecodePrompt(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lastSeq is the last sequence of the prompts stream: unchanged when
// nothing was published.
func lastSeq(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(ctxFor(t), schema.PromptsStream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// A run's prompts are tied to it by the manifest's digest: the same
// prompts in any order are a no-op, an edited prompt or a replaced id is
// refused before anything is published, naming what differs.
func TestRunPromptsAreChecked(t *testing.T) {
	e := setup(t)
	const n = 20
	lines := promptLines(0, n)
	cfg := e.config(e.file(t, "a.jsonl", lines))
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil || rep.Published != n {
		t.Fatalf("first produce: %+v, %v", rep, err)
	}
	m := storedManifest(t, e.js, cfg.Run)
	if !strings.HasPrefix(m.PromptsDigest, "v1:") || len(m.PromptsDigest) != len("v1:")+64 || m.PromptsDigest != rep.PromptsDigest {
		t.Fatalf("manifest digest %q, report %q", m.PromptsDigest, rep.PromptsDigest)
	}
	if logs := e.logs.String(); strings.Contains(logs, "cannot be verified") {
		t.Fatalf("warning on a new run:\n%s", logs)
	}

	noop := func(name string, file string) {
		t.Helper()
		c := cfg
		c.PromptsFile = file
		rep, err := Run(ctxFor(t), e.js, c)
		if err != nil || rep.Published != 0 || rep.AlreadyQueued != n {
			t.Fatalf("%s: %+v, %v; want 0 newly queued, %d already queued", name, rep, err, n)
		}
		if rep.PromptsDigest != m.PromptsDigest {
			t.Fatalf("%s: digest %s, the run's %s", name, rep.PromptsDigest, m.PromptsDigest)
		}
	}
	noop("same file", cfg.PromptsFile)
	shuffled := slices.Clone(lines)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	if slices.Equal(shuffled, lines) {
		t.Fatal("the shuffle left the lines in order")
	}
	noop("shuffled", e.file(t, "shuffled.jsonl", shuffled))

	refused := func(name string, lines []string) *PromptsConflictError {
		t.Helper()
		before := lastSeq(t, e.js)
		c := cfg
		c.PromptsFile = e.file(t, name+".jsonl", lines)
		_, err := Run(ctxFor(t), e.js, c)
		var conflict *PromptsConflictError
		if !errors.As(err, &conflict) {
			t.Fatalf("%s: error %v, want a PromptsConflictError", name, err)
		}
		for _, want := range []string{"run r1 was produced from other prompts than " + c.PromptsFile, "nothing was published", "new --run name", "produce a.jsonl again"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error lacks %q:\n%v", name, want, err)
			}
		}
		if after := lastSeq(t, e.js); after != before {
			t.Fatalf("%s: the prompts stream went from sequence %d to %d: something was published", name, before, after)
		}
		if got := storedManifest(t, e.js, cfg.Run); got.PromptsDigest != m.PromptsDigest || !got.CreatedAt.Equal(m.CreatedAt) {
			t.Fatalf("%s: manifest changed: %+v", name, got)
		}
		return conflict
	}

	// One prompt's text edited, same count.
	edited := slices.Clone(lines)
	edited[7] = `{"id":"p-00007","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"question 7, edited"}]}`
	c := refused("edited", edited)
	if !slices.Equal(c.Changed, []string{"p-00007"}) || c.NotQueuedCount != 0 || c.NotInFileCount != 0 || c.Common != n || c.Compared != n {
		t.Fatalf("edited: %+v", c)
	}
	if !strings.Contains(c.Error(), `the content differs from the queued prompt for "p-00007"`) {
		t.Errorf("edited: error does not name the prompt:\n%v", c)
	}
	if p := storedPrompt(t, e.js, cfg.Run, "p-00007"); p.Messages[1].Content != "question 7" {
		t.Fatalf("the queued prompt changed to %q", p.Messages[1].Content)
	}

	// One id replaced by a new one.
	replaced := slices.Clone(lines)
	replaced[11] = `{"id":"q-new","messages":[{"role":"user","content":"a new question"}]}`
	c = refused("replaced", replaced)
	if !slices.Equal(c.NotQueued, []string{"q-new"}) || c.NotQueuedCount != 1 || !slices.Equal(c.NotInFile, []string{"p-00011"}) || c.NotInFileCount != 1 || len(c.Changed) != 0 {
		t.Fatalf("replaced: %+v", c)
	}
	for _, want := range []string{`1 id of the file is not queued in the run: "q-new"`, `1 queued id of the run is not in the file: "p-00011"`} {
		if !strings.Contains(c.Error(), want) {
			t.Errorf("replaced: error lacks %q:\n%v", want, c)
		}
	}

	// Many prompts edited: the first few are named and reading back stops
	// there.
	many := slices.Clone(lines)
	for i := 2; i < 18; i += 2 {
		many[i] = strings.Replace(many[i], "be brief", "be thorough", 1)
	}
	c = refused("many", many)
	if want := []string{"p-00002", "p-00004", "p-00006", "p-00008", "p-00010"}; !slices.Equal(c.Changed, want) || c.Compared != 11 {
		t.Fatalf("many: changed %q after %d read back, want %q after 11", c.Changed, c.Compared, want)
	}
	if !strings.Contains(c.Error(), "(found among the first 11 of the 20 prompts in both)") {
		t.Errorf("many: %v", c)
	}
	if got := storedPrompts(t, e.js); got != n {
		t.Fatalf("stream holds %d prompts, want %d", got, n)
	}
}

// A manifest written before the digest existed cannot be checked: the
// file is accepted on its prompt count, with a warning, and the manifest
// is left as it is.
func TestRunWithoutStoredDigestWarns(t *testing.T) {
	e := setup(t)
	const n = 10
	lines := promptLines(0, n)
	cfg := e.config(e.file(t, "a.jsonl", lines))
	if _, err := Run(ctxFor(t), e.js, cfg); err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	kv, err := e.js.KeyValue(ctx, schema.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	old := storedManifest(t, e.js, cfg.Run)
	old.PromptsDigest = ""
	b, err := schema.EncodeManifest(old)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, cfg.Run, b)
	if err != nil {
		t.Fatal(err)
	}

	edited := slices.Clone(lines)
	edited[3] = strings.Replace(edited[3], "question 3", "question 3, edited", 1)
	cfg.PromptsFile = e.file(t, "edited.jsonl", edited)
	rep, err := Run(ctx, e.js, cfg)
	if err != nil || rep.Published != 0 || rep.AlreadyQueued != n {
		t.Fatalf("%+v, %v; want 0 newly queued, %d already queued", rep, err, n)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "cannot be verified against the run") ||
		!strings.Contains(logs, "has no prompts digest") {
		t.Errorf("no warning:\n%s", logs)
	}
	entry, err := kv.Get(ctx, cfg.Run)
	if err != nil {
		t.Fatal(err)
	}
	if entry.Revision() != rev {
		t.Fatalf("the stored manifest was rewritten (revision %d, was %d)", entry.Revision(), rev)
	}
	if p := storedPrompt(t, e.js, cfg.Run, "p-00003"); p.Messages[1].Content != "question 3" {
		t.Fatalf("the queued prompt changed to %q", p.Messages[1].Content)
	}

	// Its prompt count is still checked.
	cfg.PromptsFile = e.file(t, "more.jsonl", promptLines(0, n+1))
	_, err = Run(ctx, e.js, cfg)
	var conflict *PromptsConflictError
	if !errors.As(err, &conflict) || !slices.Equal(conflict.NotQueued, []string{fmt.Sprintf("p-%05d", n)}) {
		t.Fatalf("more prompts: %v", err)
	}
}

// With SkipInvalid the digest covers the valid prompts, those queued: the
// same prompts without the invalid lines are the same run.
func TestDigestCoversTheValidPrompts(t *testing.T) {
	e := setup(t)
	cfg := e.config(e.file(t, "mixed.jsonl", mixedLines))
	cfg.SkipInvalid = true
	rep, err := Run(ctxFor(t), e.js, cfg)
	if err != nil || rep.Published != 3 {
		t.Fatalf("%+v, %v", rep, err)
	}
	var clean []string
	for _, l := range mixedLines {
		if _, _, err := dataset.ParseLine([]byte(l)); err == nil {
			clean = append(clean, l)
		}
	}
	slices.Reverse(clean)
	cfg.PromptsFile = e.file(t, "clean.jsonl", clean)
	cfg.SkipInvalid = false
	dry, err := Validate(ctxFor(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m := storedManifest(t, e.js, cfg.Run); m.PromptsDigest != dry.PromptsDigest || m.PromptsDigest != rep.PromptsDigest {
		t.Fatalf("manifest digest %s, the valid lines alone %s", m.PromptsDigest, dry.PromptsDigest)
	}
	if rep, err := Run(ctxFor(t), e.js, cfg); err != nil || rep.AlreadyQueued != 3 {
		t.Fatalf("the valid lines alone: %+v, %v", rep, err)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "prompts_digest="+dry.PromptsDigest) {
		t.Errorf("Validate does not log the digest:\n%s", logs)
	}
}

// The encoding of the digests is fixed: a change is a new version, not a
// silent one, since stored manifests hold v1 digests.
func TestPromptDigest(t *testing.T) {
	p := func(id string, max int, msgs ...string) *schema.Prompt {
		q := &schema.Prompt{ID: id, MaxTokens: max}
		for i := 0; i < len(msgs); i += 2 {
			q.Messages = append(q.Messages, schema.Message{Role: msgs[i], Content: msgs[i+1]})
		}
		return q
	}
	base := p("a", 0, "user", "hello")
	same := []*schema.Prompt{
		base,
		{ID: "a", Messages: []schema.Message{user("hello")}, Source: "other.jsonl:9", Run: "r9"},
	}
	for _, q := range same {
		if promptDigest(q) != promptDigest(base) {
			t.Errorf("%+v: digest differs from %+v", q, base)
		}
	}
	different := []*schema.Prompt{
		p("b", 0, "user", "hello"),
		p("a", 0, "user", "hello!"),
		p("a", 0, "system", "hello"),
		p("a", 0, "user", "hel", "user", "lo"),
		p("a", 0, "user", "hello", "assistant", ""),
		p("ause", 0, "r", "hello"),
		p("a", 100, "user", "hello"),
	}
	seen := map[[16]byte]int{}
	for i, q := range different {
		d := promptDigest(q)
		if d == promptDigest(base) {
			t.Errorf("%+v: same digest as %+v", q, base)
		}
		if j, ok := seen[d]; ok {
			t.Errorf("%+v and %+v: same digest", q, different[j])
		}
		seen[d] = i
	}
	digests := [][16]byte{promptDigest(p("a", 0, "user", "hello")), promptDigest(p("b", 0, "user", "bye"))}
	// Computed by hand from the encoding described in digest.go.
	const want = "v1:4d074483c318a55ac4e8bd73975d7b1f94179f41b9620eca8c28cc686718a817"
	got := promptsDigest(slices.Clone(digests))
	slices.Reverse(digests)
	if again := promptsDigest(digests); again != got {
		t.Errorf("order changes the digest: %s, %s", got, again)
	}
	if got != want {
		t.Errorf("promptsDigest = %s, want %s: the v1 encoding changed", got, want)
	}
	if promptsDigest(digests[:1]) == got || !knownDigest(got) || knownDigest("v2:00") || knownDigest("") {
		t.Error("digest versions are not told apart")
	}
}
