package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/lineindex"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

// consume fetches batches from cons and hands their messages to write,
// which must make them durable and acknowledge them. It returns when ctx
// ends; a failing write is retried (the messages are not acknowledged,
// so they come again).
func (a *Aggregator) consume(ctx context.Context, cons jetstream.Consumer, write func([]jetstream.Msg) error) error {
	failures := 0
	// largest is the size of the largest message the last fetch that
	// brought any held: the next fetch asks for as many as FetchBytes
	// holds at that size.
	largest := int(a.nc.MaxPayload())
	for ctx.Err() == nil {
		if a.lacks.Load() != nil {
			// Left alone: nothing of the run is fetched any more.
			if !sleepCtx(ctx, time.Second) {
				return nil
			}
			continue
		}
		if !a.owner.valid() {
			// The lease could not be renewed lately (NATS unreachable):
			// another aggregator may take the run once it expires, so
			// nothing is written until it is renewed.
			if !sleepCtx(ctx, time.Second) {
				return nil
			}
			continue
		}
		if a.finished.Err() != nil {
			return nil
		}
		// A fetch lasts until the server ends it (it has brought the
		// messages asked for, or fetchWait is over); a stopping
		// aggregator does not give it up, since messages the server sent
		// to a fetch given up would wait out AggregatorAckWait, and
		// writes whatever the server has sent it. An aggregator that
		// stops once the run is done (on its own with ExitWhenDone, or
		// told to) gives the fetch up at once instead: any message still
		// coming is a second answer to a unit already written, or one of
		// a replay started since, and waiting out AggregatorAckWait
		// delays it without losing it. The client's deadline is a little
		// past the server's expiry (see FetchContext), so that the
		// server ends the fetch first.
		//
		// The fetch is bounded by count alone. A consumer of a
		// replicated stream sends each message only once its delivery is
		// replicated, but the status that ends a fetch bounded in bytes
		// once it has its count ("409 Batch Completed") at once: the
		// client took the status for the end and dropped the messages
		// that came after it, which then waited out the AckWait, and on
		// a backlog the same happened to every fetch.
		fctx, cancel := context.WithTimeout(a.finished, a.fetchWait+a.fetchWait/9)
		batch, err := cons.Fetch(fetchCount(a.cfg.Batch, a.cfg.FetchBytes, largest), jetstream.FetchContext(fctx))
		var got fetched
		if err == nil {
			if !a.writeArrived(ctx, batch.Messages(), write, &failures, &got) {
				cancel()
				return nil
			}
			err = batch.Error()
		}
		cancel()
		if got.n > 0 {
			largest = got.largest
		}
		if ctx.Err() != nil || a.finished.Err() != nil {
			return nil
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = nil // the server's expiry was lost: the same as a timeout
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) &&
			!errors.Is(err, jetstream.ErrBatchCompleted) {
			failures++
			a.log.Warn("fetch failed; retrying", "stream", cons.CachedInfo().Stream, "consumer", cons.CachedInfo().Name,
				"messages", got.n, "err", err)
			if !sleepCtx(ctx, backoff(failures)) {
				return nil
			}
		}
	}
	return nil
}

// fetched is what one fetch brought: how many messages, and the size of
// the largest.
type fetched struct{ n, largest int }

// fetchCount is how many messages a fetch asks for: batch, or fewer when
// that many of the largest size seen would pass bytes; at least one.
func fetchCount(batch, bytes, largest int) int {
	if largest <= 0 {
		return batch
	}
	return max(1, min(batch, bytes/largest))
}

// writeArrived writes the messages of one fetch as they arrive, each
// group being what has arrived by the time the previous write is done:
// the last results of a run are written at once, not when the fetch
// expires, and under load the groups grow by themselves, so that one
// fsync covers many results (up to the fetch's count). Once a write
// fails, or while the lease is in doubt, the rest of the fetch is handed
// back as it arrives; after a failed write writeArrived waits out the
// backoff. It counts what arrived in got, and returns false if ctx ends
// meanwhile.
func (a *Aggregator) writeArrived(ctx context.Context, msgs <-chan jetstream.Msg, write func([]jetstream.Msg) error, failures *int, got *fetched) bool {
	failed := false
	for m := range msgs {
		group := []jetstream.Msg{m}
	more:
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					break more
				}
				group = append(group, m)
			default:
				break more
			}
		}
		for _, m := range group {
			got.n++
			got.largest = max(got.largest, len(m.Subject())+len(m.Data()))
		}
		if failed || !a.owner.valid() {
			nakAll(group, time.Second)
			continue
		}
		if err := write(group); err != nil {
			*failures++
			failed = true
			a.setWriteError(err)
			a.metrics.writeFailed()
			a.log.Error("CANNOT WRITE OUTPUT: not acknowledging results until it works; free disk space or fix the data directory's permissions",
				"err", err, "attempt", *failures, "retry_in", backoff(*failures))
			nakAll(group, time.Second)
			continue
		}
		if *failures > 0 {
			a.log.Info("writing output again", "after_attempts", *failures)
		}
		a.setWriteError(nil)
		*failures = 0
	}
	return !failed || sleepCtx(ctx, backoff(*failures))
}

// nakAll hands messages back to be delivered again after delay.
func nakAll(msgs []jetstream.Msg, delay time.Duration) {
	for _, m := range msgs {
		_ = m.NakWithDelay(delay)
	}
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
// fsyncs, and only then acknowledges them. Results whose unit (id and
// sample) is already written (a redelivery after a crash) are
// acknowledged and skipped. A unit that had failed and now completed
// leaves failed.jsonl (at the next flush: see failedFile). A result that cannot be decoded is turned
// into a dead letter (poison), so that it reaches failed.jsonl the way
// every failure does and `aerie replay` can put the prompt back to work.
func (a *Aggregator) writeResults(msgs []jetstream.Msg) error {
	var buf bytes.Buffer
	enc := newEncoder(&buf)
	var keys []string
	var fresh []lineindex.Summary
	var written, poisoned []jetstream.Msg
	var poisonErrs []error
	msgs = a.fitting(msgs)
	a.mu.Lock()
	seen := make(map[string]bool)
	for _, m := range msgs {
		r, err := decodeResult(m)
		if err != nil {
			poisoned, poisonErrs = append(poisoned, m), append(poisonErrs, err)
			continue
		}
		written = append(written, m)
		key := r.Unit().Key()
		done, err := a.completions.has(key)
		if err != nil {
			a.mu.Unlock()
			return err
		}
		if done || seen[key] {
			continue
		}
		seen[key] = true
		line := dataset.NewCompletionLine(r)
		if err := enc.Encode(&line); err != nil {
			a.mu.Unlock()
			return err
		}
		keys = append(keys, key)
		fresh = append(fresh, lineindex.Summarize(&line))
	}
	if err := a.completions.appendLines(&buf, keys, fresh); err != nil {
		a.mu.Unlock()
		return err
	}
	answers := make([]throughput.Answer, len(fresh))
	for i := range fresh {
		answers[i] = a.answerOf(&fresh[i])
	}
	a.metrics.wroteCompletions(answers)
	now := time.Now()
	for i, ans := range answers {
		if a.failed.final(keys[i]) {
			a.est.Reopened(a.failed.markCompleted(keys[i]))
		}
		a.est.Completed(now, a.observed(ans))
	}
	a.kickIfComplete()
	a.mu.Unlock()
	ackAll(written, a)
	for i, m := range poisoned {
		if err := a.deadLetterResult(m, poisonErrs[i]); err != nil {
			a.log.Error("cannot dead-letter an undecodable result; it comes again", "subject", m.Subject(), "err", err)
			_ = m.NakWithDelay(5 * time.Second)
			continue
		}
		ackAll([]jetstream.Msg{m}, a)
	}
	return nil
}

func newEncoder(w *bytes.Buffer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

// writeDeadLetters appends new dead letters to failed.jsonl, fsyncs, then
// acknowledges. A dead letter for a unit that has a completion is
// skipped: the answer wins. One newer than the failure already written
// for its unit (it was replayed and failed again) replaces that line, so
// failed.jsonl holds every failed unit's latest failure.
func (a *Aggregator) writeDeadLetters(msgs []jetstream.Msg) error {
	msgs = a.fitting(msgs)
	a.mu.Lock()
	defer a.mu.Unlock()
	var buf bytes.Buffer
	enc := newEncoder(&buf)
	var keys []string
	var at []time.Time
	var requests []int
	replace := map[string][]byte{}
	replacedAt := map[string]time.Time{}
	replacedRequests := map[string]int{}
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
		key := d.Unit().Key()
		done, err := a.completions.has(key)
		if err != nil {
			return err
		}
		if done || seen[key] {
			continue
		}
		seen[key] = true
		n := failedRequests(turnHeads(d.Messages), a.turnsAll)
		if a.failed.final(key) {
			if a.failed.newer(key, d.FailedAt) {
				var line bytes.Buffer
				if err := newEncoder(&line).Encode(dataset.NewFailedLine(d)); err != nil {
					return err
				}
				replace[key], replacedAt[key], replacedRequests[key] = line.Bytes(), d.FailedAt, n
			}
			continue
		}
		if err := enc.Encode(dataset.NewFailedLine(d)); err != nil {
			return err
		}
		keys = append(keys, key)
		at = append(at, d.FailedAt)
		requests = append(requests, n)
	}
	if err := a.failed.appendLines(&buf, keys, at, requests); err != nil {
		return err
	}
	a.metrics.wroteFailed(len(keys))
	if len(replace) > 0 {
		before := make(map[string]int, len(replace))
		for key := range replace {
			before[key] = a.failed.requests[key]
		}
		if err := a.failed.change(nil, replace, replacedAt, replacedRequests); err != nil {
			return err
		}
		for key, n := range replacedRequests {
			if n != before[key] { // the same line count, another share of the turns
				a.est.Reopened(before[key])
				a.est.RestoreFailed(n)
			}
		}
		a.log.Info("replaced the failed lines of units that failed again after a replay", "units", len(replace))
	}
	now := time.Now()
	for _, n := range requests {
		a.est.Failed(now, n)
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
	a.kickNow()
}

// kickNow asks the event loop for an event (and a look at whether the run
// is done) at once.
func (a *Aggregator) kickNow() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}
