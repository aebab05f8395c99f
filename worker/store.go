package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/batchstore"
	"github.com/aerie-dev/aerie/natsdial"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// link is a worker's connection to NATS. replies is set by Run before
// any goroutine that waits for a reply starts, nil before (the waits run
// their course).
type link struct {
	js      jetstream.JetStream
	nc      *nats.Conn
	replies *natsdial.Replies
}

// store is what a worker keeps in JetStream, acknowledgements aside:
// results, dead letters, the turns of conversations and the failures
// counted against prompts; and it reads back what earlier deliveries
// kept. Its streams are opened by open, before any prompt is processed,
// and not changed after. The zero value is not usable; New makes it.
type store struct {
	// name is the worker's: every message says who stored it.
	name string
	link *link
	log  *slog.Logger
	// room holds the pulls while the JetStream store is full.
	room *storeGate

	results, dead, prompts, turns jetstream.Stream
	attempts                      jetstream.KeyValue
	// batches group-commit results and turns while Run runs.
	batches batches
}

// publishBudget bounds how long a worker keeps trying to store one result
// or dead letter, even while stopping: an answer that took minutes of GPU
// time is worth a few more seconds.
const publishBudget = time.Minute

// open looks up the streams; the turns stream only when turns says a run
// served may need it (--turns all). The attempts bucket is opened before
// (see Worker.start).
func (s *store) open(ctx context.Context, opts provision.Options, turns bool) error {
	var err error
	if s.results, err = s.link.js.Stream(ctx, schema.ResultsStream); err == nil {
		s.dead, err = s.link.js.Stream(ctx, schema.DeadStream)
	}
	if err == nil {
		s.prompts, err = s.link.js.Stream(ctx, schema.PromptsStream)
	}
	if err != nil {
		return fmt.Errorf("worker %s: look up aerie's streams (run `aerie produce` first, it creates them): %w", s.name, err)
	}
	if turns {
		if s.turns, err = provision.TurnsStream(ctx, s.link.js, opts); err != nil {
			return fmt.Errorf("worker %s: open the turns stream of a --turns all run: %w", s.name, err)
		}
	}
	return nil
}

// message is a message about unit u of run with aerie's headers, naming
// the features a reader needs to handle it (schema.HeaderNeeds).
func (s *store) message(run, subject, kind string, u schema.Unit, data []byte, needs []string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(schema.HeaderMsgID, schema.MsgID(run, u))
	if u.ID != "" {
		m.Header.Set(schema.HeaderPromptID, u.ID)
	}
	if u.Sample > 0 {
		m.Header.Set(schema.HeaderSample, strconv.Itoa(u.Sample))
	}
	m.Header.Set(schema.HeaderRun, run)
	m.Header.Set(schema.HeaderSchema, schema.SchemaHeader(kind))
	m.Header.Set(schema.HeaderContentType, schema.ContentTypeMsgpack)
	m.Header.Set(schema.HeaderWorker, s.name)
	schema.SetNeeds(m.Header, needs)
	return m
}

// put publishes m to a once-per-subject stream and waits for the
// server's acknowledgement, retrying transient failures with the same
// message id. A subject that already holds a message counts as stored: a
// prompt delivered twice has its first answer kept.
func (s *store) put(ctx context.Context, m *nats.Msg) error {
	_, err := s.putOnce(ctx, m)
	return err
}

// putOnce is put, and says whether m is what the subject holds now
// (ours) or the subject held a message already. A publish of m that was
// stored but whose acknowledgement was lost counts as not ours: m's
// subject then holds m or an earlier message, to be read to know which.
//
// Results and turns go first to the stream's group commit, to be stored
// in one atomic batch with others; a message the batch did not store
// (alone, refused whole because another message of it was already
// stored, or of unknown fate) is then published on its own, which tells
// whether its subject already held a message.
func (s *store) putOnce(ctx context.Context, m *nats.Msg) (ours bool, err error) {
	deadline := time.Now().Add(publishBudget)
	if b := s.batches.of(m.Subject); b != nil {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		o, _ := b.Submit(m).Wait(wctx)
		cancel()
		if o == batchstore.Stored {
			return true, nil
		}
	}
	return s.putAlone(ctx, m, deadline)
}

// putAlone is putOnce for one message on its own, retried until
// deadline.
func (s *store) putAlone(ctx context.Context, m *nats.Msg, deadline time.Time) (ours bool, err error) {
	for i := 1; ; i++ {
		pctx, cancel := s.link.replies.Wait(context.WithoutCancel(ctx), 10*time.Second)
		ack, err := s.link.js.PublishMsg(pctx, m, jetstream.WithExpectLastSequencePerSubject(0))
		cancel()
		if err == nil {
			s.room.roomAgain(s.log)
			return !ack.Duplicate, nil
		}
		if provision.IsAlreadyStored(err) {
			return false, nil
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return false, fmt.Errorf("publish %s: %d bytes is over the server's max_payload (%d bytes): raise max_payload in the NATS server configuration: %w",
				m.Subject, len(m.Data), s.link.nc.MaxPayload(), err)
		}
		if provision.IsNoRoom(err) {
			// No deadline: the answer is kept until there is room, or
			// until the worker stops (then the prompt goes back).
			s.room.fullNow(err, s.log)
			if ctx.Err() != nil {
				return false, fmt.Errorf("publish %s: the JetStream store is full, and the worker stops: %w", m.Subject, err)
			}
		} else {
			if time.Now().After(deadline) {
				return false, fmt.Errorf("publish %s: gave up after %d attempts: %w", m.Subject, i, err)
			}
			s.log.Warn("publish failed; retrying", "subject", m.Subject, "attempt", i, "err", err)
		}
		t := time.NewTimer(retryDelay(i, 200*time.Millisecond, 5*time.Second))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// putResult stores r, the result of unit u of a run that needs runNeeds
// (schema.Manifest.Needs), and reports whether the
// result stored is this one (ours), not an earlier copy's: a hedge's or
// another delivery's. When it is stored but its acknowledgement was lost
// and reading it back fails, it returns a *readBackError.
func (s *store) putResult(ctx context.Context, r *schema.Result, u schema.Unit, runNeeds []string) (ours bool, err error) {
	data, err := schema.EncodeResult(r)
	if err != nil {
		return false, err
	}
	subject := schema.ResultSubject(r.Run, u)
	if ours, err = s.putOnce(ctx, s.message(r.Run, subject, schema.KindResult, u, data, schema.MessageNeeds(runNeeds, r.Uses()))); err != nil || ours {
		return ours, err
	}
	// Not known to be ours: its acknowledgement may have been lost.
	if ours, err = s.storedByUs(ctx, subject); err != nil {
		return false, &readBackError{err}
	}
	return ours, nil
}

// readBackError is a result stored, by whichever copy, that could not be
// read back to know which.
type readBackError struct{ err error }

func (e *readBackError) Error() string { return e.err.Error() }
func (e *readBackError) Unwrap() error { return e.err }

// storedByUs reads back the result stored on subject after a publish
// that was not known to be ours (its acknowledgement may have been lost)
// and reports whether this worker stored it.
func (s *store) storedByUs(ctx context.Context, subject string) (bool, error) {
	m, err := lastStored(ctx, s.results, subject)
	if err != nil || m == nil {
		return false, err
	}
	return m.Header.Get(schema.HeaderWorker) == s.name, nil
}

// result returns the result stored for unit u of run, nil when there is
// none.
func (s *store) result(ctx context.Context, run string, u schema.Unit) (*jetstream.RawStreamMsg, error) {
	return lastStored(ctx, s.results, schema.ResultSubject(run, u))
}

// lastStored returns the message stored on subject in st, or nil when
// there is none. The look-up is bounded even while the worker stops.
func lastStored(ctx context.Context, st jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	m, err := st.GetLastMsgForSubject(gctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	return m, err
}

// readPrompt reads the prompt message at seq in the prompts stream.
func (s *store) readPrompt(ctx context.Context, seq uint64) (*schema.Prompt, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := s.prompts.GetMsg(gctx, seq)
	if err != nil {
		return nil, fmt.Errorf("read prompt message %d: %w", seq, err)
	}
	if err := schema.CheckSchemaHeader(schema.KindPrompt, raw.Header.Get(schema.HeaderSchema)); err != nil {
		return nil, err
	}
	return schema.DecodePrompt(raw.Data)
}

// promptAtOrAfter reads the first prompt at or after stream sequence seq
// on subject filter, and returns it with its sequence.
func (s *store) promptAtOrAfter(ctx context.Context, seq uint64, filter string) (*schema.Prompt, uint64, error) {
	raw, err := s.prompts.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
	if err != nil {
		return nil, 0, err
	}
	if err := schema.CheckSchemaHeader(schema.KindPrompt, raw.Header.Get(schema.HeaderSchema)); err != nil {
		return nil, 0, err
	}
	p, err := schema.DecodePrompt(raw.Data)
	return p, raw.Sequence, err
}

// batches are the group commits of a worker's stores: results, and turns
// with --turns all. The prompts this worker holds finish close together,
// and their answers, stored as one atomic batch, share one fsync on the
// server instead of taking one each. Dead letters are rare and go alone.
type batches struct {
	results, turns *batchstore.Store
}

// startBatches starts the group commits of the streams open found and
// returns what stops them, once no prompt is being processed.
func (s *store) startBatches() (stop func()) {
	opts := batchstore.Options{Stream: schema.ResultsStream, Logger: s.log, Wait: s.link.replies.Wait}
	s.batches.results = batchstore.New(s.link.js, opts)
	if s.turns != nil {
		opts.Stream = schema.TurnsStream
		s.batches.turns = batchstore.New(s.link.js, opts)
	}
	return func() {
		s.batches.results.Close()
		args := []any{"results", s.batches.results.Batched(), "result_batches", s.batches.results.Batches()}
		if s.batches.turns != nil {
			s.batches.turns.Close()
			args = append(args, "turns", s.batches.turns.Batched(), "turn_batches", s.batches.turns.Batches())
		}
		s.log.Info("group commit: stored in batches", args...)
	}
}

// of is the group commit for subject's stream, or nil for a message
// that goes alone.
func (b *batches) of(subject string) *batchstore.Store {
	switch {
	case strings.HasPrefix(subject, schema.ResultsRoot+"."):
		return b.results
	case strings.HasPrefix(subject, schema.TurnsRoot+"."):
		return b.turns
	}
	return nil
}
