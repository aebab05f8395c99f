package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// seenID records where a prompt id was first found and what the prompt
// holds (kept packed in a seenIDs).
type seenID struct {
	line int
	// digest is the prompt's promptDigest: the run's digest is made of
	// them, and a stored prompt is compared with the file's through it.
	digest [16]byte
	// derived: the id was computed from the content.
	derived bool
	// rejected: the line was valid but cannot be published (too large),
	// so the publishing pass skips it.
	rejected bool
}

// scan is the outcome of the validation pass.
type scan struct {
	report Report
	// ids maps the subject token of every valid id to where it was first
	// found; the publishing pass publishes a line only when it is that
	// first place.
	ids  seenIDs
	info os.FileInfo
	// unit names the file's records: "line" or "row".
	unit string
	// perMessage is how many samples each prompt message asks for, from
	// the run's manifest (schema.Manifest.PerMessage); set before the
	// publishing pass.
	perMessage int
	// needs is the features the run's manifest needs, which every
	// message names (schema.HeaderNeeds); set with perMessage.
	needs []string
	// turns sums the turns of the valid prompts: schema.TurnSlots of each
	// with --turns all, one each otherwise.
	turns int
	// tokens sums the input tokens of the valid extraction samples;
	// maxID is their largest token id, first found at maxIDAt.
	tokens  int64
	maxID   int64
	maxIDAt string
}

// scanFile is the validation pass: it reads every record, checks it,
// counts and finds duplicate ids. When limit is positive it also rejects
// prompts whose message would exceed the server's max_payload of limit
// bytes. An error is returned only when the file cannot be read or ctx
// ends.
func scanFile(ctx context.Context, cfg Config, limit int64) (*scan, error) {
	rd, err := dataset.Open(cfg.PromptsFile, cfg.parseOptions())
	if err != nil {
		return nil, fmt.Errorf("produce: open prompts file: %w", err)
	}
	defer rd.Close()
	info := rd.Info()
	sc := &scan{info: info, unit: rd.Unit()}
	source := filepath.Base(cfg.PromptsFile)
	meter := newMeter(cfg.Progress, "validating "+source, info.Size(), bytesLine, "")
	defer meter.finish()

	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sc, fmt.Errorf("produce: %s: %w", cfg.PromptsFile, err)
		}
		meter.set(rd.Offset())
		sc.report.Lines = rd.Count()
		if rec.N%1024 == 0 && ctx.Err() != nil {
			return sc, fmt.Errorf("produce: validating %s stopped at %s %d: %w", cfg.PromptsFile, rd.Unit(), rec.N, ctx.Err())
		}
		reason := sc.check(cfg, source, rec, limit)
		if reason == "" {
			sc.report.Valid++
			continue
		}
		sc.report.Invalid++
		sc.report.addProblem(Problem{File: cfg.PromptsFile, Line: rec.N, Reason: reason})
	}
	sc.report.Lines = rd.Count()
	sc.report.PromptsDigest = sc.promptsDigest()
	sc.report.Samples = cfg.samples()
	sc.report.Units = sc.report.Valid * cfg.samples()
	sc.report.Turns = sc.turns * cfg.samples()
	sc.report.Order = cfg.order(sc.report.Hinted, sc.report.Valid)
	if cfg.extraction() {
		sc.report.Tokens = sc.tokens
		sc.report.Bytes = sc.tokens * cfg.Extraction.BytesPerToken()
	}
	return sc, nil
}

// promptsDigest is the digest of the prompts the publishing pass
// publishes: the valid ones. Their digests are sorted outside the Go
// heap (16 MB for a million prompts, for well under a second), for the
// reason seenIDs lives there.
func (sc *scan) promptsDigest() string {
	buf, free := offHeap(16 * max(sc.report.Valid, 1))
	defer free()
	rows := digestRows(buf[:0])
	sc.ids.each(func(e seenID) {
		if !e.rejected {
			rows = append(rows, e.digest[:]...)
		}
	})
	return rows.digest()
}

// check validates one record and records its id; it returns why the
// record is not accepted, or "".
func (sc *scan) check(cfg Config, source string, rec dataset.Record, limit int64) string {
	if rec.Err != nil {
		return rec.Err.Error()
	}
	l, line := rec.Line, rec.N
	if int64(line) > maxSeenLine {
		return fmt.Sprintf("past %s %d: split the file into files of fewer %ss", sc.unit, int64(maxSeenLine), sc.unit)
	}
	key := tokenOf(l.ID)
	if first, ok := sc.ids.get(key); ok {
		if l.Derived && first.derived {
			return fmt.Sprintf("same content as %s %d", sc.unit, first.line)
		}
		return fmt.Sprintf("duplicate id %q (first on %s %d)", dataset.Truncate(l.ID, 60), sc.unit, first.line)
	}
	if cfg.extraction() {
		if err := dataset.CheckExtraction(&l, cfg.VocabSize, cfg.MaxInputTokens); err != nil {
			return fmt.Sprintf("idx %s: %v", l.ID, err)
		}
	}
	p := linePrompt(cfg.Run, fmt.Sprintf("%s:%d", source, line), l)
	entry := seenID{line: line, derived: l.Derived, digest: promptDigest(p)}
	var reason string
	if limit > 0 {
		// The last sample's message is the largest: its sample number
		// is the longest, and only samples after the first carry one.
		p.Sample = cfg.samples() - 1
		// Its headers as large as they may come: every feature named.
		m, err := promptMessage(p, schema.Implemented())
		switch {
		case err != nil:
			reason = err.Error()
		case payloadSize(m) > limit:
			reason = oversizeReason(l.ID, payloadSize(m), limit)
		}
	}
	entry.rejected = reason != ""
	sc.ids.put(key, entry)
	if !entry.rejected && l.LengthHint > 0 {
		sc.report.Hinted++
	}
	if !entry.rejected {
		sc.tokens += int64(len(l.InputIDs))
		for _, id := range l.InputIDs {
			if id > sc.maxID || sc.maxIDAt == "" {
				sc.maxID, sc.maxIDAt = id, fmt.Sprintf("%s %d (idx %s)", sc.unit, line, l.ID)
			}
		}
		if cfg.turnsAll() {
			sc.turns += schema.TurnSlots(l.Messages)
		} else {
			sc.turns++
		}
	}
	return reason
}
