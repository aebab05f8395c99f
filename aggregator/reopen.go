package aggregator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// refresh brings failed.jsonl in line with the dead letters in NATS, the
// record of which units (prompt and sample) are failed for good. `aerie
// replay` queues a unit again and then removes its dead letter: from
// then on the unit is pending, not failed, and the run is not done until
// its new outcome is written. So a line whose dead letter is gone leaves
// failed.jsonl (its new outcome writes a new line), unless the unit's
// result is stored but unreadable (a poison line from before unreadable
// results were dead-lettered): that one gets its dead letter now, so that
// replay can reach it. refresh also removes the lines of units completed
// since the last one.
func (a *Aggregator) refresh(ctx context.Context) error {
	tokens, err := a.deadTokens(ctx)
	if err != nil {
		return err
	}
	// Which lines lost their dead letter, and when each was written: a
	// line replaced meanwhile (a newer failure) is left alone below.
	a.mu.Lock()
	gone := map[string]time.Time{}
	for key := range a.failed.failedAt {
		if a.failed.final(key) && !tokens[tokenOfLine(key)] {
			gone[key] = a.failed.failedAt[key]
		}
	}
	a.mu.Unlock()

	drop := map[string]bool{}
	for key := range gone {
		stored, readable, err := a.resultState(ctx, tokenOfLine(key))
		switch {
		case err != nil:
			return err
		case stored && !readable:
			if err := a.deadLetterLine(ctx, key); err != nil {
				return err
			}
		default:
			drop[key] = true
		}
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	requests := map[string]int{}
	for key := range drop {
		if !a.failed.final(key) || !a.failed.failedAt[key].Equal(gone[key]) {
			delete(drop, key)
			continue
		}
		requests[key] = a.failed.requests[key]
	}
	if len(drop) == 0 && len(a.failed.completed) == 0 {
		return nil
	}
	if err := a.failed.change(drop, nil, nil, nil); err != nil {
		return err
	}
	for _, n := range requests {
		a.est.Reopened(n)
	}
	if len(drop) > 0 {
		a.log.Info("units queued again by a replay left failed.jsonl; the run waits for their new outcome", "units", len(drop))
	}
	return nil
}

// deadTokens returns the subject tokens of the run's dead letters: one
// paged listing of the subjects rather than a look-up per failed prompt.
func (a *Aggregator) deadTokens(ctx context.Context) (map[string]bool, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	s, err := a.js.Stream(lctx, schema.DeadStream)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	info, err := s.Info(lctx, jetstream.WithSubjectFilter(schema.RunFilter(schema.DeadRoot, a.cfg.Run)))
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	tokens := make(map[string]bool, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		tokens[schema.PromptToken(subject)] = true
	}
	return tokens, nil
}

// tokenOfLine is the subject token of the unit of a failed line, given
// its key (schema.Unit.Key): the unit's token, or, for a line named after
// a subject (a message that carried no prompt id), the subject's last
// token.
func tokenOfLine(key string) string {
	u := unitOfKey(key)
	if subject, ok := strings.CutPrefix(u.ID, "subject:"); ok {
		return schema.PromptToken(subject)
	}
	return u.Token()
}

// deadLetterLine stores a poison dead letter for a failed line that has
// none, whose result is stored but unreadable.
func (a *Aggregator) deadLetterLine(ctx context.Context, key string) error {
	token := tokenOfLine(key)
	u := unitOfKey(key)
	d := &schema.DeadLetter{Run: a.cfg.Run, ID: u.ID, Sample: u.Sample, Reason: schema.ReasonPoison,
		Error: "the stored result cannot be read", FailedAt: time.Now().UTC()}
	if p, seq, err := a.storedPrompt(ctx, token); err == nil {
		d.Messages, d.Params, d.PromptSeq = p.Messages, p.Params, seq
		d.InputIDs, d.LossMask = p.InputIDs, p.LossMask
	}
	return a.publishDeadLetter(ctx, token, d)
}
