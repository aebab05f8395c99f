package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// ManifestConflictError is returned when the run already has a manifest
// with another model, other sampling parameters or another policy. A run
// generates every prompt with the same settings, so changing them means a
// new run. When the prompts differ too, Differences says so briefly; with
// the same settings, other prompts are a *PromptsConflictError.
type ManifestConflictError struct {
	Run string
	// Differences describe each field that differs, stored value first.
	Differences []string
}

func (e *ManifestConflictError) Error() string {
	return fmt.Sprintf("run %s was produced with other settings: %s; use a new --run name to change parameters (the stored manifest: nats kv get --raw %s %s)",
		e.Run, strings.Join(e.Differences, "; "), schema.RunsBucket, e.Run)
}

// writeManifest stores the run's manifest, or checks that the stored one
// (from an earlier produce of the run) has the same model, parameters and
// policy, and that the file holds the prompts the run was produced from
// (see checkPromptSet). It returns the manifest in force and whether it
// was written now.
func writeManifest(ctx context.Context, js jetstream.JetStream, cfg Config, sc *scan) (*schema.Manifest, bool, error) {
	kv, err := provision.RunsBucket(ctx, js, cfg.Provision)
	if err != nil {
		return nil, false, fmt.Errorf("produce run %s: %w", cfg.Run, err)
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	m := &schema.Manifest{
		Run:       cfg.Run,
		Model:     cfg.Model,
		Params:    cfg.Params,
		Policy:    cfg.Policy,
		Total:     sc.report.Units,
		Source:    filepath.Base(cfg.PromptsFile),
		Producer:  host,
		CreatedAt: time.Now().UTC(),
		// Covers the valid prompts: with SkipInvalid, those queued.
		PromptsDigest:  sc.report.PromptsDigest,
		Turns:          schema.TurnsLast,
		Samples:        cfg.samples(),
		ReturnTokenIDs: cfg.ReturnTokenIDs,
		Prompts:        sc.report.Valid,
		TotalTurns:     sc.report.Turns,
		Needs:          slices.Clone(cfg.Needs),
		WrittenBy:      schema.BuildVersion(),
	}
	if cfg.Schedule != nil {
		m.Schedule = *cfg.Schedule
	}
	if cfg.extraction() {
		m.Task = schema.TaskHiddenStates
		x := *cfg.Extraction
		x.LayerIDs, x.Tokens = slices.Clone(x.LayerIDs), sc.tokens
		m.Extraction = &x
	}
	if cfg.turnsAll() {
		m.Turns = schema.TurnsAll
		m.ContextReasoning = contextReasoning(cfg.ContextReasoning)
	} else if cfg.samples() > 1 {
		m.SamplesPerMessage = cfg.samples()
	}
	b, err := schema.EncodeManifest(m)
	if err != nil {
		return nil, false, fmt.Errorf("produce run %s: %w", cfg.Run, err)
	}
	err = createWaitingForRoom(ctx, kv, cfg.Run, b, cfg.Logger)
	if err == nil {
		return m, true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, false, fmt.Errorf("produce run %s: store manifest in KV bucket %s: %w", cfg.Run, schema.RunsBucket, err)
	}
	entry, err := kv.Get(ctx, cfg.Run)
	if err != nil {
		return nil, false, fmt.Errorf("produce run %s: read existing manifest from KV bucket %s: %w", cfg.Run, schema.RunsBucket, err)
	}
	old, err := schema.DecodeManifest(entry.Value())
	if err != nil {
		return nil, false, fmt.Errorf("produce run %s: the stored manifest cannot be read (%w): use a new --run name", cfg.Run, err)
	}
	if diffs := settingsDiff(old, m); len(diffs) > 0 {
		return nil, false, &ManifestConflictError{Run: cfg.Run, Differences: append(diffs, promptSetDiff(old, m)...)}
	}
	for _, f := range cfg.Needs {
		if !slices.Contains(old.Needs, f) {
			return nil, false, &ManifestConflictError{Run: cfg.Run, Differences: []string{fmt.Sprintf("feature %s is needed now, not in the stored manifest (it needs %s)", f, needsList(old.Needs))}}
		}
	}
	if err := checkPromptSet(ctx, js, cfg, sc, old, m); err != nil {
		return nil, false, err
	}
	if cfg.Schedule != nil && *cfg.Schedule != old.Schedule {
		cfg.Logger.Warn("the run exists: its stored schedule is kept; change it with `aerie runs set`",
			"run", cfg.Run, "stored_priority", old.Priority, "stored_weight", old.Share(), "stored_paused", old.Paused,
			"given_priority", cfg.Schedule.Priority, "given_weight", cfg.Schedule.Share())
	}
	return old, false, nil
}

// needsList is needs for a message: "none" when empty.
func needsList(needs []string) string {
	if len(needs) == 0 {
		return "none"
	}
	return strings.Join(needs, ", ")
}

// contextReasoning is a ContextReasoning setting or its default, drop.
func contextReasoning(s string) string {
	if s == "" {
		return schema.ContextReasoningDrop
	}
	return s
}

// promptCount is a manifest's prompt count: Prompts, or Total in
// manifests written before Prompts existed (they had one sample).
func promptCount(m *schema.Manifest) int {
	if m.Prompts > 0 {
		return m.Prompts
	}
	return m.Total
}

// settingsDiff describes the settings that make two manifests different
// runs: model, every sampling parameter, policy, turns, samples and token
// ids. Fields a manifest written before they existed leaves empty are
// compared by their defaults, so that such a run resumes. Source,
// producer host and time may differ: the same file produced again from
// another host is the same run.
func settingsDiff(stored, now *schema.Manifest) []string {
	var d []string
	field := func(name, a, b string) {
		if a != b {
			d = append(d, fmt.Sprintf("%s is %s in the stored manifest, %s now", name, a, b))
		}
	}
	field("model", strconv.Quote(stored.Model), strconv.Quote(now.Model))
	sp, np := &stored.Params, &now.Params
	field("max_tokens", strconv.Itoa(sp.MaxTokens), strconv.Itoa(np.MaxTokens))
	field("temperature", optFloat(sp.Temperature), optFloat(np.Temperature))
	field("top_p", optFloat(sp.TopP), optFloat(np.TopP))
	field("top_k", optInt(sp.TopK), optInt(np.TopK))
	field("min_p", optFloat(sp.MinP), optFloat(np.MinP))
	field("presence_penalty", optFloat(sp.PresencePenalty), optFloat(np.PresencePenalty))
	field("frequency_penalty", optFloat(sp.FrequencyPenalty), optFloat(np.FrequencyPenalty))
	field("repetition_penalty", optFloat(sp.RepetitionPenalty), optFloat(np.RepetitionPenalty))
	field("seed", optInt(sp.Seed), optInt(np.Seed))
	field("stop", optStrings(sp.Stop), optStrings(np.Stop))
	field("reasoning_effort", optString(sp.ReasoningEffort), optString(np.ReasoningEffort))
	field("chat_template_kwargs", optObject(sp.ChatTemplateKwargs), optObject(np.ChatTemplateKwargs))
	field("extra_body", optObject(sp.ExtraBody), optObject(np.ExtraBody))
	field("max_attempts", strconv.Itoa(stored.Policy.Attempts()), strconv.Itoa(now.Policy.Attempts()))
	field("on_length", stored.Policy.Length(), now.Policy.Length())
	field("length_retry_max_tokens", strconv.Itoa(stored.Policy.LengthRetryMaxTokens), strconv.Itoa(now.Policy.LengthRetryMaxTokens))
	field("turns", stored.TurnsMode(), now.TurnsMode())
	if stored.TurnsMode() == schema.TurnsAll && now.TurnsMode() == schema.TurnsAll {
		field("context_reasoning", contextReasoning(stored.ContextReasoning), contextReasoning(now.ContextReasoning))
	}
	field("samples", strconv.Itoa(stored.SampleCount()), strconv.Itoa(now.SampleCount()))
	field("return_token_ids", strconv.FormatBool(stored.ReturnTokenIDs), strconv.FormatBool(now.ReturnTokenIDs))
	field("task", stored.TaskKind(), now.TaskKind())
	field("extraction", extractionSettings(stored.Extraction), extractionSettings(now.Extraction))
	return d
}

func optFloat(f *float64) string {
	if f == nil {
		return "unset"
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}

func optInt[T int | int64](v *T) string {
	if v == nil {
		return "unset"
	}
	return strconv.FormatInt(int64(*v), 10)
}

func optString(s string) string {
	if s == "" {
		return "unset"
	}
	return strconv.Quote(s)
}

// optObject writes a JSON object canonical: the manifest stores it
// indented, the flags give it compact.
func optObject(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "unset"
	}
	if c, err := schema.CanonicalObject(raw); err == nil {
		return string(c)
	}
	return string(raw)
}

func optStrings(s []string) string {
	if len(s) == 0 {
		return "unset"
	}
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// createWaitingForRoom creates key in kv, and while the JetStream store
// is full tries again with a back-off until it has room or ctx ends,
// saying so and what to do when it first finds it full and every
// storeFullLogEvery after.
func createWaitingForRoom(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, log *slog.Logger) error {
	var since, logged time.Time
	for n := 1; ; n++ {
		_, err := kv.Create(ctx, key, value)
		if err == nil && !since.IsZero() {
			log.Info("the JetStream store has room again: queuing goes on", "run", key, "waited", time.Since(since).Round(time.Second))
		}
		if !provision.IsNoRoom(err) {
			return err
		}
		now := time.Now()
		if since.IsZero() {
			since = now
		}
		if logged.IsZero() || now.Sub(logged) >= storeFullLogEvery {
			logged = now
			log.Error("the JetStream store is full: the run's manifest waits for room; free space with aerie runs rm of an old run, or raise the server's max_file_store",
				"run", key, "waiting", now.Sub(since).Round(time.Second), "err", err)
		}
		t := time.NewTimer(backoff(min(n, 5)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (stopped waiting for room: %w)", err, ctx.Err())
		}
	}
}

// extractionSettings is what an extraction run's files must be, for a
// comparison: its layers, hidden size, dtype and output directory.
func extractionSettings(x *schema.Extraction) string {
	if x == nil {
		return "none"
	}
	return fmt.Sprintf("layers %v, hidden size %d, dtype %s, out %q", x.LayerIDs, x.HiddenSize, x.DType, x.Out)
}
