package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// consume fetches batches from cons and hands each to write, which must
// make them durable and acknowledge them. It returns when ctx ends; a
// failing write is retried (the batch is not acknowledged, so it comes
// again).
func (a *Aggregator) consume(ctx context.Context, cons jetstream.Consumer, write func([]jetstream.Msg) error) error {
	failures := 0
	for ctx.Err() == nil {
		batch, err := cons.Fetch(a.cfg.Batch, jetstream.FetchMaxWait(time.Second))
		var msgs []jetstream.Msg
		if err == nil {
			for m := range batch.Messages() {
				msgs = append(msgs, m)
			}
			err = batch.Error()
		}
		if len(msgs) > 0 {
			if werr := write(msgs); werr != nil {
				failures++
				a.setWriteError(werr)
				a.log.Error("CANNOT WRITE OUTPUT: not acknowledging results until it works; free disk space or fix the data directory's permissions",
					"err", werr, "attempt", failures, "retry_in", backoff(failures))
				for _, m := range msgs {
					_ = m.NakWithDelay(time.Second)
				}
				if !sleepCtx(ctx, backoff(failures)) {
					return nil
				}
				continue
			}
			if failures > 0 {
				a.log.Info("writing output again", "after_attempts", failures)
			}
			a.setWriteError(nil)
			failures = 0
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			failures++
			a.log.Warn("fetch failed; retrying", "err", err)
			if !sleepCtx(ctx, backoff(failures)) {
				return nil
			}
		}
	}
	return nil
}

func backoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(n, 6)
	return min(d, 5*time.Second)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// writeResults appends the new results of a batch to completions.jsonl,
// fsyncs, and only then acknowledges the batch. Results whose id is
// already written (a redelivery after a crash) are acknowledged and
// skipped. A result that cannot be decoded becomes a "poison" line in
// failed.jsonl, named by the prompt id in its header. A prompt that had
// failed and now completed (it was replayed) leaves failed.jsonl.
func (a *Aggregator) writeResults(msgs []jetstream.Msg) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var buf, poisoned bytes.Buffer
	enc, penc := newEncoder(&buf), newEncoder(&poisoned)
	var ids, poisonIDs []string
	var fresh []*schema.Result
	recovered := map[string]bool{}
	seen := make(map[string]bool)
	for _, m := range msgs {
		r, err := decodeResult(m)
		if err != nil {
			id := m.Headers().Get(schema.HeaderPromptID)
			if id == "" {
				id = "subject:" + m.Subject()
			}
			a.log.Error("undecodable result message: recorded as poison in failed.jsonl", "subject", m.Subject(), "prompt_id", id, "err", err)
			if a.completions.has(id) || a.failed.has(id) || seen[id] {
				continue
			}
			seen[id] = true
			if err := penc.Encode(failedLine{ID: id, Reason: schema.ReasonPoison, Error: "result message: " + err.Error(),
				Worker: m.Headers().Get(schema.HeaderWorker), FailedAt: time.Now().UTC()}); err != nil {
				return err
			}
			poisonIDs = append(poisonIDs, id)
			continue
		}
		if a.completions.has(r.ID) || seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		if err := enc.Encode(newCompletionLine(r)); err != nil {
			return err
		}
		ids = append(ids, r.ID)
		fresh = append(fresh, r)
		if a.failed.has(r.ID) {
			recovered[r.ID] = true
		}
	}
	if err := a.completions.appendLines(&buf, ids); err != nil {
		return err
	}
	if err := a.failed.appendLines(&poisoned, poisonIDs); err != nil {
		return err
	}
	if err := a.failed.remove(recovered); err != nil {
		// The answers are written; the stale failed lines are only
		// cosmetic and go at the next recovery or restart.
		a.log.Error("cannot remove replayed prompts from failed.jsonl", "err", err)
	}
	now := time.Now()
	for _, r := range fresh {
		if recovered[r.ID] {
			a.est.Recovered()
		}
		a.est.Completed(now, r.CompletionTokens, r.FinishReason == "length")
	}
	for range poisonIDs {
		a.est.Failed(now)
	}
	ackAll(msgs, a)
	a.kickIfComplete()
	return nil
}

func newEncoder(w *bytes.Buffer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

// writeDeadLetters appends new dead letters to failed.jsonl, fsyncs, then
// acknowledges. A dead letter for a prompt that has a completion is
// skipped: the answer wins.
func (a *Aggregator) writeDeadLetters(msgs []jetstream.Msg) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var buf bytes.Buffer
	enc := newEncoder(&buf)
	var ids []string
	seen := make(map[string]bool)
	for _, m := range msgs {
		if err := schema.CheckSchemaHeader(schema.KindDeadLetter, m.Headers().Get(schema.HeaderSchema)); err != nil {
			a.log.Error("discarding dead letter of unknown schema", "subject", m.Subject(), "err", err)
			continue
		}
		d, err := schema.DecodeDeadLetter(m.Data())
		if err != nil {
			a.log.Error("discarding undecodable dead letter", "subject", m.Subject(), "err", err)
			continue
		}
		if d.ID == "" {
			d.ID = "subject:" + m.Subject()
		}
		if a.failed.has(d.ID) || a.completions.has(d.ID) || seen[d.ID] {
			continue
		}
		seen[d.ID] = true
		if err := enc.Encode(newFailedLine(d)); err != nil {
			return err
		}
		ids = append(ids, d.ID)
	}
	if err := a.failed.appendLines(&buf, ids); err != nil {
		return err
	}
	now := time.Now()
	for range ids {
		a.est.Failed(now)
	}
	ackAll(msgs, a)
	a.kickIfComplete()
	return nil
}

func decodeResult(m jetstream.Msg) (*schema.Result, error) {
	if err := schema.CheckSchemaHeader(schema.KindResult, m.Headers().Get(schema.HeaderSchema)); err != nil {
		return nil, err
	}
	return schema.DecodeResult(m.Data())
}

// ackAll acknowledges a written batch. A lost ack only means a redelivery,
// which is skipped by id, so acks are not waited for one by one.
func ackAll(msgs []jetstream.Msg, a *Aggregator) {
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			a.log.Warn("ack failed; the message will be skipped when it comes again", "subject", m.Subject(), "err", err)
		}
	}
}

// kickIfComplete asks the event loop for an event at once when every
// prompt is accounted for, so that the end of a run is reported (and
// ExitWhenDone honoured) without waiting for the next tick.
// Called with a.mu held.
func (a *Aggregator) kickIfComplete() {
	if a.completions.count()+a.failed.count() < a.total {
		return
	}
	select {
	case a.kick <- struct{}{}:
	default:
	}
}
