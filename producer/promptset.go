package producer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// Bounds on listing what differs between a file and the run it is
// produced to, done only when the run is refused.
const (
	// shownIDs is how many ids of each kind of difference are named.
	shownIDs = 5
	// maxCompared bounds the queued prompts read back to find edited ones:
	// one direct get each, about 0.1 ms from a local server and 1 ms
	// across a cluster, so at most a few seconds, 10 s on a cluster.
	maxCompared = 10000
	// listTimeout bounds the listing of the run's subjects, which the
	// server pages 100,000 at a time: a run of a million prompts takes
	// ten requests and a few seconds.
	listTimeout = 2 * time.Minute
)

// PromptsConflictError is returned when the run exists and the file's
// valid prompts are not the set it was produced from: ids added or
// removed, or a prompt edited. Nothing was published. A run's prompts
// cannot change once queued: a queued prompt is never replaced, so an
// edited one would keep its old text, and the aggregator counts the run
// done at the manifest's total, so added ones would be left out.
type PromptsConflictError struct {
	Run, File string
	// StoredTotal, StoredSource and StoredDigest are the run's prompt
	// count, the file it was produced from and its prompts digest (empty
	// in manifests written before the digest existed); Total and Digest
	// are the file's.
	StoredTotal, Total   int
	StoredSource         string
	StoredDigest, Digest string
	// NotQueued names the first ids of the file (in file order) that the
	// run has not queued: new ones, or ones an interrupted produce did not
	// reach; NotQueuedCount counts them all.
	NotQueued      []string
	NotQueuedCount int
	// NotInFile names queued ids of the run (in subject order) that the
	// file does not hold as valid prompts; NotInFileCount counts the
	// prompt messages queued for them: with Samples above 1 a prompt has
	// one per sample.
	NotInFile      []string
	NotInFileCount int
	Samples        int
	// Changed names ids whose queued prompt differs from the file's,
	// found by reading back Compared of the Common prompts queued and in
	// the file, in file order, stopping after shownIDs differences or
	// maxCompared reads.
	Changed          []string
	Compared, Common int
	// ListErr says why the differences could not all be listed; nil when
	// they were.
	ListErr error
}

func (e *PromptsConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s was produced from other prompts than %s, so nothing was published:", e.Run, e.File)
	if e.StoredTotal != e.Total {
		fmt.Fprintf(&b, "\n  the run has %d prompts (from %s), %s has %d valid prompts", e.StoredTotal, e.StoredSource, e.File, e.Total)
	}
	if e.NotQueuedCount > 0 {
		fmt.Fprintf(&b, "\n  %d %s of the file %s not queued in the run: %s", e.NotQueuedCount,
			plural(e.NotQueuedCount, "id", "ids"), plural(e.NotQueuedCount, "is", "are"), idList(e.NotQueued, e.NotQueuedCount))
	}
	switch {
	case e.NotInFileCount > 0 && e.Samples > 1:
		fmt.Fprintf(&b, "\n  %d queued %s of the run %s of ids not in the file: %s", e.NotInFileCount,
			plural(e.NotInFileCount, "sample", "samples"), plural(e.NotInFileCount, "is", "are"), idList(e.NotInFile, len(e.NotInFile)))
	case e.NotInFileCount > 0:
		fmt.Fprintf(&b, "\n  %d queued %s of the run %s not in the file: %s", e.NotInFileCount,
			plural(e.NotInFileCount, "id", "ids"), plural(e.NotInFileCount, "is", "are"), idList(e.NotInFile, e.NotInFileCount))
	}
	switch {
	case len(e.Changed) > 0:
		fmt.Fprintf(&b, "\n  the content differs from the queued prompt for %s (found among the first %d of the %d prompts in both)",
			idList(e.Changed, len(e.Changed)), e.Compared, e.Common)
	case e.Compared > 0 && e.Compared == e.Common:
		fmt.Fprintf(&b, "\n  the %d prompts in both have the same content", e.Common)
	case e.Compared > 0:
		fmt.Fprintf(&b, "\n  no content differs among the first %d of the %d prompts in both (the others were not read back)", e.Compared, e.Common)
	}
	if e.StoredDigest != "" {
		fmt.Fprintf(&b, "\n  prompts digest of the run %s, of the file %s", e.StoredDigest, e.Digest)
	}
	if e.ListErr != nil {
		fmt.Fprintf(&b, "\n  (the differences could not all be listed: %v)", e.ListErr)
	}
	fmt.Fprintf(&b, "\na run's prompts cannot change once queued: produce %s under a new --run name, or produce %s again to resume run %s",
		e.File, e.StoredSource, e.Run)
	return b.String()
}

// idList quotes the ids named, then says how many more of total there are.
func idList(ids []string, total int) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = strconv.Quote(dataset.Truncate(id, 60))
	}
	s := strings.Join(q, ", ")
	if total > len(ids) {
		s += fmt.Sprintf(" and %d more", total-len(ids))
	}
	return s
}

// promptSetDiff describes, briefly, how the file's prompt set differs from
// the run's: count, and digest when the stored one can be compared.
func promptSetDiff(stored, now *schema.Manifest) []string {
	var d []string
	if promptCount(stored) != promptCount(now) {
		d = append(d, fmt.Sprintf("the prompt count is %d in the stored manifest (from %s), %d valid prompts now (from %s)",
			promptCount(stored), stored.Source, promptCount(now), now.Source))
	}
	if knownDigest(stored.PromptsDigest) && stored.PromptsDigest != now.PromptsDigest {
		d = append(d, fmt.Sprintf("the prompts differ too (prompts digest %s in the stored manifest, %s now)", stored.PromptsDigest, now.PromptsDigest))
	}
	return d
}

// checkPromptSet accepts the file's prompts for a run that exists with the
// same settings when they are the set the run was produced from. A
// manifest without a digest it can compare (written before the digest
// existed, or by a later encoding) is accepted on its prompt count, with a
// warning, and left as it is.
func checkPromptSet(ctx context.Context, js jetstream.JetStream, cfg Config, sc *scan, stored, now *schema.Manifest) error {
	if len(promptSetDiff(stored, now)) > 0 {
		return promptsConflict(ctx, js, cfg, sc, stored)
	}
	if stored.PromptsDigest == now.PromptsDigest {
		return nil
	}
	why := "the run's manifest has no prompts digest: it was written before aerie recorded one"
	if stored.PromptsDigest != "" {
		why = fmt.Sprintf("the run's prompts digest is of an encoding this aerie does not know (%s)", dataset.Truncate(stored.PromptsDigest, 12))
	}
	cfg.Logger.Warn("produce: the prompts file cannot be verified against the run; accepted on its prompt count alone",
		"run", cfg.Run, "file", cfg.PromptsFile, "reason", why,
		"consequence", "prompts already queued keep their queued content whatever the file says; only ids not queued yet are published",
		"prompts", promptCount(stored), "stored_source", stored.Source, "prompts_digest", now.PromptsDigest)
	return nil
}

// promptsConflict builds the refusal of a file whose prompts are not the
// run's, naming what differs.
func promptsConflict(ctx context.Context, js jetstream.JetStream, cfg Config, sc *scan, stored *schema.Manifest) *PromptsConflictError {
	e := &PromptsConflictError{
		Run: cfg.Run, File: cfg.PromptsFile,
		StoredTotal: promptCount(stored), Total: sc.report.Valid, StoredSource: stored.Source,
		StoredDigest: stored.PromptsDigest, Digest: sc.report.PromptsDigest,
		Samples: cfg.samples(),
	}
	e.ListErr = listDifferences(ctx, js, cfg, sc, stored, e)
	return e
}

// listDifferences fills in e what differs between the file and the
// prompts queued for the run. An id is queued when its first sample (the
// plain prompt subject) is. Its cost, paid only when a produce is
// refused:
//   - one listing of the run's subjects on the prompts stream (ten paged
//     requests for a million prompts, and the client holds them all for a
//     moment, about 100 MB for a million),
//   - with samples, a reading of the file to recognise the subjects of
//     its prompts' other samples (one SHA-256 per sample),
//   - a look-up of each queued id absent from the file, at most shownIDs,
//   - a reading of the file, in order, stopping as soon as the first ids
//     not queued are named and the content comparison is done,
//   - and one read-back per prompt compared, at most maxCompared.
func listDifferences(ctx context.Context, js jetstream.JetStream, cfg Config, sc *scan, stored *schema.Manifest, e *PromptsConflictError) error {
	stream, err := js.Stream(ctx, schema.PromptsStream)
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", schema.PromptsStream, err)
	}
	queued, err := queuedSubjects(ctx, stream, cfg.Run)
	if err != nil {
		return err
	}
	prefix := strings.TrimSuffix(schema.RunFilter(schema.PromptsRoot, cfg.Run), ">")
	absent := map[string]bool{}
	for subject := range queued {
		if first, ok := sc.ids.get(subjectToken(subject, prefix)); ok && !first.rejected {
			e.Common++
			continue
		}
		absent[subject] = true
	}
	if cfg.samples() > 1 && len(absent) > 0 {
		if err := dropOtherSamples(ctx, cfg, sc, absent); err != nil {
			return err
		}
	}
	// A message of several samples (Manifest.SamplesPerMessage) counts
	// as that many.
	e.NotInFileCount = len(absent) * stored.PerMessage()
	e.NotQueuedCount = sc.report.Valid - e.Common
	subjects := slices.Sorted(maps.Keys(absent))
	for _, subject := range subjects[:min(len(subjects), shownIDs)] {
		if id := queuedID(ctx, stream, subject); !slices.Contains(e.NotInFile, id) {
			e.NotInFile = append(e.NotInFile, id) // samples of one id are named once
		}
	}
	return compareFile(ctx, cfg, sc, stream, queued, e)
}

// dropOtherSamples removes from absent (queued subjects that are not the
// first sample of a prompt of the file) the subjects of the other samples
// of the file's prompts, reading the file again: what is left is queued
// for prompts the file does not hold.
func dropOtherSamples(ctx context.Context, cfg Config, sc *scan, absent map[string]bool) error {
	rd, err := dataset.Open(cfg.PromptsFile, cfg.parseOptions())
	if err != nil {
		return fmt.Errorf("open prompts file again: %w", err)
	}
	defer rd.Close()
	for len(absent) > 0 {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.PromptsFile, err)
		}
		if rec.N%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if rec.Err != nil {
			continue
		}
		l := rec.Line
		if first, ok := sc.ids.get(tokenOf(l.ID)); !ok || first.line != rec.N || first.rejected {
			continue
		}
		for k := 1; k < cfg.samples(); k++ {
			delete(absent, schema.PromptSubject(cfg.Run, schema.Unit{ID: l.ID, Sample: k}))
		}
	}
	return nil
}

// subjectToken is the digest behind the last token of a prompt subject
// (see tokenOf), or zero when the subject is not prefix and a token.
func subjectToken(subject, prefix string) [16]byte {
	var tok [16]byte
	b, err := hex.DecodeString(strings.TrimPrefix(subject, prefix))
	if err == nil && len(b) == len(tok) && strings.HasPrefix(subject, prefix) {
		copy(tok[:], b)
	}
	return tok
}

// queuedSubjects lists the subjects of the run's prompts on stream.
func queuedSubjects(ctx context.Context, stream jetstream.Stream, run string) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	filter := schema.RunFilter(schema.PromptsRoot, run)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("list the subjects %s of stream %s: %w", filter, schema.PromptsStream, err)
	}
	return info.State.Subjects, nil
}

// queuedID is the id of the prompt stored on subject, or the subject and
// why it could not be read.
func queuedID(ctx context.Context, stream jetstream.Stream, subject string) string {
	m, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return fmt.Sprintf("%s (not readable: %v)", subject, err)
	}
	p, err := schema.DecodePrompt(m.Data)
	if err != nil {
		return fmt.Sprintf("%s (not readable: %v)", subject, err)
	}
	return p.ID
}

// compareFile reads the file again, in order, naming its first ids that
// are not queued and reading back queued prompts to find the first whose
// content differs from the file's.
func compareFile(ctx context.Context, cfg Config, sc *scan, stream jetstream.Stream, queued map[string]uint64, e *PromptsConflictError) error {
	rd, err := dataset.Open(cfg.PromptsFile, cfg.parseOptions())
	if err != nil {
		return fmt.Errorf("open prompts file again: %w", err)
	}
	defer rd.Close()
	toName := min(e.NotQueuedCount, shownIDs)
	toCompare := min(e.Common, maxCompared)
	for len(e.NotQueued) < toName || (e.Compared < toCompare && len(e.Changed) < shownIDs) {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.PromptsFile, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if rec.Err != nil {
			continue
		}
		id := rec.Line.ID
		first, ok := sc.ids.get(tokenOf(id))
		if !ok || first.line != rec.N || first.rejected {
			continue
		}
		subject := schema.PromptSubject(cfg.Run, schema.Unit{ID: id})
		if _, ok := queued[subject]; !ok {
			if len(e.NotQueued) < toName {
				e.NotQueued = append(e.NotQueued, id)
			}
			continue
		}
		if e.Compared >= toCompare || len(e.Changed) >= shownIDs {
			continue
		}
		e.Compared++
		same, err := sameAsQueued(ctx, stream, subject, first.digest)
		if err != nil {
			return fmt.Errorf("read back prompt %q: %w", dataset.Truncate(id, 60), err)
		}
		if !same {
			e.Changed = append(e.Changed, id)
		}
	}
	return nil
}

// sameAsQueued reports whether the prompt queued on subject has the given
// digest. A prompt removed meanwhile (a replay queues it again) counts as
// the same; one that cannot be decoded, as different. A replay may set
// MaxTokens on a queued prompt to retry a truncated answer: that does not
// make it another prompt, and a file cannot set it, so the comparison
// leaves it out; the line's params (Params) it keeps.
func sameAsQueued(ctx context.Context, stream jetstream.Stream, subject string, digest [16]byte) (bool, error) {
	m, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	p, err := schema.DecodePrompt(m.Data)
	if err != nil {
		return false, nil
	}
	return promptDigest(&schema.Prompt{ID: p.ID, Messages: p.Messages, Params: p.Params}) == digest, nil
}
