// Package producer queues the prompts of a run: it reads a JSONL file,
// checks every line, writes the run manifest and publishes one message per
// prompt to the prompts stream, or one per sample of it with
// Config.Samples (each a schema.Unit).
//
// The file is read twice and never held in memory: the first pass
// validates every line and finds duplicate ids, so that a bad file
// publishes nothing (unless told to skip bad lines); the second pass
// publishes. Publishing is idempotent for good: each unit has its own
// subject, which the stream holds at most once, and every publish expects
// that subject to be empty. Producing the same file again, after a crash
// or on purpose, publishes exactly the prompts that are missing; a file
// with other prompts is refused, since the run manifest holds a digest of
// the run's prompt set.
package producer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// Validate runs the validation pass alone (for a dry run): it reads every
// line, checks it, finds duplicate ids and computes the digest of the
// prompt set (Report.PromptsDigest), touching no server. With
// invalid lines and cfg.SkipInvalid false it returns an *InvalidError;
// the report is returned in every case once the file could be read.
// Prompts too large for a server's max_payload are found only by Run,
// which knows the server.
func Validate(ctx context.Context, cfg Config) (*Report, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sc, err := scanFile(ctx, cfg, 0)
	if sc == nil {
		return nil, err
	}
	defer sc.ids.release()
	rep := &sc.report
	rep.Elapsed = time.Since(start)
	if err == nil {
		err = accept(cfg, sc)
	}
	if err != nil {
		return rep, err
	}
	cfg.Logger.Info("produce validated", "file", cfg.PromptsFile, "lines", rep.Lines, "valid", rep.Valid,
		"invalid", rep.Invalid, "prompts_digest", rep.PromptsDigest, "elapsed", rep.Elapsed.Round(time.Millisecond))
	return rep, nil
}

// Run validates cfg.PromptsFile, then creates the streams if needed,
// writes or checks the run manifest, creates the workers' consumer and
// publishes every valid prompt. Nothing is published when a line is
// invalid and cfg.SkipInvalid is false (*InvalidError), when the run
// exists with other settings (*ManifestConflictError), or when it exists
// with the same settings but other prompts (*PromptsConflictError): the
// manifest holds a digest of the run's prompts, whatever their order, so
// the same prompts produced again are recognised and an edited file is
// refused. Prompts that could not be published are named in an
// *IncompleteError; producing again publishes them. The report is
// returned whenever the file could be read, errors included.
//
// js should allow at least cfg.MaxPending outstanding asynchronous
// publishes (jetstream.WithPublishAsyncMaxPending; the default allows
// 4000).
func Run(ctx context.Context, js jetstream.JetStream, cfg Config) (*Report, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	limit := js.Conn().MaxPayload()
	sc, err := scanFile(ctx, cfg, limit)
	if sc == nil {
		return nil, err
	}
	defer sc.ids.release()
	rep := &sc.report
	defer func() { rep.Elapsed = time.Since(start) }()
	if err == nil {
		err = accept(cfg, sc)
	}
	if err != nil {
		return rep, err
	}

	if cfg.extraction() && cfg.CheckTokenIDs != nil {
		if err := cfg.CheckTokenIDs(ctx, sc.maxID); err != nil {
			return rep, fmt.Errorf("produce run %s: %s of %s holds token id %d: %w; nothing was queued", cfg.Run, sc.maxIDAt, cfg.PromptsFile, sc.maxID, err)
		}
	}
	if err := provision.Streams(ctx, js, cfg.Provision); err != nil {
		return rep, fmt.Errorf("produce run %s: %w", cfg.Run, err)
	}
	manifest, created, err := writeManifest(ctx, js, cfg, sc)
	if err != nil {
		return rep, err
	}
	if !created {
		cfg.Logger.Info("produce: run exists with the same settings; publishing only the prompts not queued yet",
			"run", cfg.Run, "created_at", manifest.CreatedAt, "producer", manifest.Producer, "prompts_digest", manifest.PromptsDigest)
	}
	if _, err := provision.WorkersConsumer(ctx, js, cfg.Run, cfg.Provision); err != nil {
		return rep, fmt.Errorf("produce run %s: %w", cfg.Run, err)
	}
	stream, err := js.Stream(ctx, schema.PromptsStream)
	if err != nil {
		return rep, fmt.Errorf("produce run %s: look up stream %s: %w", cfg.Run, schema.PromptsStream, err)
	}
	if cfg.Accepted != nil {
		cfg.Accepted(manifest)
	}
	// The run's own format: a run produced before samples went in one
	// message goes on with one message per sample.
	sc.perMessage, sc.needs = manifest.PerMessage(), manifest.Needs

	m := newMeter(cfg.Progress, fmt.Sprintf("publishing %s to run %s", filepath.Base(cfg.PromptsFile), cfg.Run), int64(rep.Units), promptsLine, unitNoun(cfg.samples()))
	pub := newPublisher(js, cfg, stream, limit, m)
	err = publishFile(ctx, cfg, sc, pub)
	m.finish()

	published, already, failed, problems := pub.results()
	rep.Published, rep.AlreadyQueued, rep.Failed = published, already, failed
	for _, p := range problems {
		rep.addProblem(p)
	}
	slices.SortStableFunc(rep.Problems, func(a, b Problem) int { return cmp.Compare(a.Line, b.Line) })
	rep.Elapsed = time.Since(start)
	logSummary(cfg, rep)
	if err != nil {
		return rep, err
	}
	if failed > 0 {
		return rep, &IncompleteError{File: cfg.PromptsFile, Run: cfg.Run, Failed: failed, Valid: rep.Valid,
			Samples: rep.Samples, Units: rep.Units, Problems: problems}
	}
	return rep, nil
}

// unitNoun names the prompt messages of a run in progress reports:
// prompts, or samples when each prompt is queued several times.
func unitNoun(samples int) string {
	if samples > 1 {
		return "samples"
	}
	return "prompts"
}

// accept decides, after the validation pass, whether publishing may go on.
func accept(cfg Config, sc *scan) error {
	rep := &sc.report
	if rep.Invalid > 0 && !cfg.SkipInvalid {
		return &InvalidError{File: cfg.PromptsFile, Invalid: rep.Invalid, Problems: rep.Problems, Unit: sc.unit, Extraction: cfg.extraction()}
	}
	if rep.Invalid > 0 {
		shown := min(len(rep.Problems), shownProblems)
		for _, p := range rep.Problems[:shown] {
			cfg.Logger.Warn("produce: skipping invalid line", "problem", p.String())
		}
		if rep.Invalid > shown {
			cfg.Logger.Warn("produce: skipping more invalid lines", "file", cfg.PromptsFile, "more", rep.Invalid-shown, "invalid", rep.Invalid)
		}
	}
	if rep.Valid == 0 {
		return fmt.Errorf("produce: %s has no valid prompt (%d lines, %d invalid): nothing to publish", cfg.PromptsFile, rep.Lines, rep.Invalid)
	}
	return nil
}

// publishFile is the publishing pass: it reads the file again and hands
// every line that the validation pass accepted to the publisher, then
// waits until each is settled.
func publishFile(ctx context.Context, cfg Config, sc *scan, pub *publisher) error {
	f, err := os.Open(cfg.PromptsFile)
	if err != nil {
		return fmt.Errorf("produce run %s: open prompts file again: %w", cfg.Run, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("produce run %s: %w", cfg.Run, err)
	}
	if !os.SameFile(sc.info, info) || info.Size() != sc.info.Size() || !info.ModTime().Equal(sc.info.ModTime()) {
		return changedError(cfg, "it was replaced or modified after validation")
	}
	rd, err := dataset.NewReader(f, cfg.parseOptions())
	if err != nil {
		return fmt.Errorf("produce run %s: %s: %w", cfg.Run, cfg.PromptsFile, err)
	}
	defer rd.Close()
	if sc.report.Order == OrderLongestFirst {
		return publishLongestFirst(ctx, cfg, sc, rd, pub)
	}
	pub.start(ctx)
	ch := newChunker(pub, cfg.MaxPending)
	err = feed(ctx, cfg, sc, rd, ch.add)
	if err == nil {
		err = ch.flush(ctx, cfg, sc.unit)
	}
	pub.finish(ctx)
	return err
}

// feed reads the file and hands each accepted prompt's messages to add,
// in the file's order.
func feed(ctx context.Context, cfg Config, sc *scan, rd *dataset.Reader, add func(context.Context, *entry) error) error {
	source := filepath.Base(cfg.PromptsFile)
	unit := rd.Unit()
	queued := 0
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("produce run %s: %s: %w", cfg.Run, cfg.PromptsFile, err)
		}
		if rec.Err != nil {
			continue // invalid in the validation pass too, or caught by the count below
		}
		l, n := rec.Line, rec.N
		first, ok := sc.ids.get(tokenOf(l.ID))
		if !ok {
			return changedError(cfg, fmt.Sprintf("%s %d holds id %q, which was not there before", unit, n, dataset.Truncate(l.ID, 60)))
		}
		if first.line != n || first.rejected {
			continue // a duplicate, or too large: reported by the validation pass
		}
		p := linePrompt(cfg.Run, fmt.Sprintf("%s:%d", source, n), l)
		if promptDigest(p) != first.digest {
			// What is published must be what the manifest's digest covers.
			return changedError(cfg, fmt.Sprintf("the prompt %q on %s %d is not the one validated", dataset.Truncate(l.ID, 60), unit, n))
		}
		// With --turns last, the samples of a prompt go in one message,
		// answered in one request (n); a conversation's samples each go
		// in their own, as their turns are generated one by one (see
		// Manifest.SamplesPerMessage).
		perMessage := max(sc.perMessage, 1)
		if perMessage > 1 {
			p.Samples = perMessage
		}
		for k := 0; k < cfg.samples(); k += perMessage {
			p.Sample = k
			msg, err := promptMessage(p, sc.needs)
			if err != nil {
				return fmt.Errorf("produce %s %s %d: %w", cfg.PromptsFile, unit, n, err)
			}
			if err := add(ctx, &entry{line: n, id: l.ID, sample: k, units: perMessage, msg: msg, hint: l.LengthHint}); err != nil {
				return fmt.Errorf("produce run %s: stopped at %s %d of %s: %w; the prompts queued so far stay queued, produce again to publish the rest",
					cfg.Run, unit, n, cfg.PromptsFile, err)
			}
		}
		queued++
	}
	if queued != sc.report.Valid {
		return changedError(cfg, fmt.Sprintf("%d valid prompts found on validation, %d now", sc.report.Valid, queued))
	}
	return nil
}

func changedError(cfg Config, detail string) error {
	return fmt.Errorf("produce run %s: %s changed while it was being produced (%s): keep the file unchanged while producing; prompts queued so far stay queued, so produce the original file again, or the new one under a new --run name",
		cfg.Run, cfg.PromptsFile, detail)
}

// logSummary writes the one line that closes a produce.
func logSummary(cfg Config, rep *Report) {
	rate := 0.0
	if secs := rep.Elapsed.Seconds(); secs > 0 {
		rate = float64(rep.Published+rep.AlreadyQueued) / secs
	}
	level := slog.LevelInfo
	if rep.Failed > 0 {
		level = slog.LevelWarn
	}
	cfg.Logger.Log(context.Background(), level, "produce finished",
		"run", cfg.Run, "file", cfg.PromptsFile,
		"lines", rep.Lines, "valid", rep.Valid, "invalid", rep.Invalid,
		"published", rep.Published, "already_queued", rep.AlreadyQueued, "failed", rep.Failed,
		"order", rep.Order, "length_hints", rep.Hinted,
		"elapsed", rep.Elapsed.Round(time.Millisecond), "prompts_per_sec", math.Round(rate))
}
