package producer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
		Total:     sc.report.Valid,
		Source:    filepath.Base(cfg.PromptsFile),
		Producer:  host,
		CreatedAt: time.Now().UTC(),
		// Covers the valid prompts: with SkipInvalid, those queued.
		PromptsDigest: sc.report.PromptsDigest,
	}
	b, err := schema.EncodeManifest(m)
	if err != nil {
		return nil, false, fmt.Errorf("produce run %s: %w", cfg.Run, err)
	}
	_, err = kv.Create(ctx, cfg.Run, b)
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
	if err := checkPromptSet(ctx, js, cfg, sc, old, m); err != nil {
		return nil, false, err
	}
	return old, false, nil
}

// settingsDiff describes the settings that make two manifests different
// runs: model, sampling parameters and policy. Source, producer host and
// time may differ: the same file produced again from another host is the
// same run.
func settingsDiff(stored, now *schema.Manifest) []string {
	var d []string
	field := func(name, a, b string) {
		if a != b {
			d = append(d, fmt.Sprintf("%s is %s in the stored manifest, %s now", name, a, b))
		}
	}
	field("model", strconv.Quote(stored.Model), strconv.Quote(now.Model))
	field("max_tokens", strconv.Itoa(stored.Params.MaxTokens), strconv.Itoa(now.Params.MaxTokens))
	field("temperature", optFloat(stored.Params.Temperature), optFloat(now.Params.Temperature))
	field("top_p", optFloat(stored.Params.TopP), optFloat(now.Params.TopP))
	field("max_attempts", strconv.Itoa(stored.Policy.Attempts()), strconv.Itoa(now.Policy.Attempts()))
	field("on_length", stored.Policy.Length(), now.Policy.Length())
	field("length_retry_max_tokens", strconv.Itoa(stored.Policy.LengthRetryMaxTokens), strconv.Itoa(now.Policy.LengthRetryMaxTokens))
	return d
}

func optFloat(f *float64) string {
	if f == nil {
		return "unset"
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}
