package producer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/batchstore"
	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// Timing of publishes (the acknowledgement timeout is Config.AckTimeout).
const (
	// retryBase and retryMax shape the backoff between attempts: retryBase
	// doubling per attempt, at most retryMax, with jitter so that hundreds
	// of prompts failed together are not retried together.
	retryBase = 250 * time.Millisecond
	retryMax  = 5 * time.Second
	// lookupTimeout bounds the look-up of a stored prompt's sequence.
	lookupTimeout = 10 * time.Second
)

// ackTimeoutError is the outcome of a publish whose acknowledgement did
// not come within the acknowledgement timeout after it was sent.
type ackTimeoutError struct{ timeout time.Duration }

func (e *ackTimeoutError) Error() string {
	return fmt.Sprintf("no acknowledgement from the server within %v", e.timeout)
}

// entry is one prompt on its way to the stream. It holds a publishing
// slot from its first attempt until its outcome is settled.
type entry struct {
	line int
	id   string
	// sample is the prompt's sample this message queues (0 without
	// samples), the first of units samples (see schema.Prompt.Samples).
	sample, units int
	// hint is the prompt's length hint, which orders the queue.
	hint     int
	msg      *nats.Msg
	attempts int
	future   jetstream.PubAckFuture
	// ticket, while not nil, is the latest attempt's place in a group
	// commit (instead of future); alone says the prompt goes on its own
	// from now on, since a batch did not store it.
	ticket *batchstore.Ticket
	alone  bool
	// sentAt is when the latest attempt was sent: its acknowledgement is
	// due by sentAt plus the acknowledgement timeout.
	sentAt  time.Time
	retryAt time.Time
}

// verdict is what one publish attempt came to.
type verdict int

const (
	// stored: the server stored the prompt now.
	stored verdict = iota
	// alreadyThere: the subject already held the prompt (a repeat).
	alreadyThere
	// retry: the attempt failed in a way another attempt may not.
	retry
	// noRoom: the store is full; the prompt waits for room without
	// counting the attempt.
	noRoom
	// permanent: another attempt would fail the same way.
	permanent
)

// classify maps the outcome of one publish attempt to a verdict.
func classify(ack *jetstream.PubAck, err error) verdict {
	switch {
	case err == nil && ack != nil && ack.Duplicate:
		return alreadyThere
	case err == nil:
		return stored
	case provision.IsAlreadyStored(err):
		return alreadyThere
	case errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrBadHeaderMsg),
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return permanent
	}
	if provision.IsNoRoom(err) {
		return noRoom
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return permanent
	}
	return retry
}

// backoff is the wait before attempt n+1, after n failed attempts.
func backoff(n int) time.Duration {
	d := retryMax
	if n < 16 {
		d = min(retryBase<<(n-1), retryMax)
	}
	return d/2 + rand.N(d/2+1)
}

// publisher publishes prompts asynchronously with at most cap(slots)
// awaiting acknowledgement. One goroutine (the caller's) publishes and
// republishes; the collector goroutine waits for acknowledgements in
// publishing order and settles each prompt: done, or back to the caller
// through the retry channel. Each entry is in exactly one place (the
// inflight channel, the collector's hands, the retry channel, the caller's
// hands) and holds a slot there, so neither channel, being as large as the
// slot count, ever blocks.
type publisher struct {
	js      jetstream.JetStream
	stream  jetstream.Stream // the prompts stream; nil in some tests
	run     string
	file    string
	retries int
	// ackTimeout bounds the wait for each publish's acknowledgement,
	// counted from the moment it was sent.
	ackTimeout time.Duration
	startSeq   uint64
	limit      int64
	meter      *meter
	// batch group-commits prompts to the prompts stream; nil publishes
	// each on its own.
	batch *batchstore.Store

	slots    chan struct{}
	inflight chan *entry
	retry    chan *entry
	done     chan struct{}

	mu        sync.Mutex
	published int
	already   int
	failed    []Problem
	nFailed   int

	// log hears that the store is full; fullSince is when it was found
	// full (zero while it has room), fullLogged when that was last said.
	log                   *slog.Logger
	fullSince, fullLogged time.Time
}

// storeFullLogEvery is how often a producer waiting for room says so.
const storeFullLogEvery = 30 * time.Second

// waitRoom records a prompt refused for want of room in the store: it is
// tried again with the back-off, the attempt not counted, for as long as
// the produce runs. The first refusal, and one every storeFullLogEvery,
// say what to do.
func (p *publisher) waitRoom(e *entry, err error) {
	p.mu.Lock()
	now := time.Now()
	first := p.fullSince.IsZero()
	if first {
		p.fullSince = now
	}
	say := first || now.Sub(p.fullLogged) >= storeFullLogEvery
	if say {
		p.fullLogged = now
	}
	since := p.fullSince
	p.mu.Unlock()
	if say && p.log != nil {
		p.log.Error("the JetStream store is full: queuing waits for room; free space with aerie runs rm of an old run, or raise the server's max_file_store",
			"run", p.run, "waiting", now.Sub(since).Round(time.Second), "err", err)
	}
	e.attempts = max(e.attempts-1, 0)
	e.retryAt = now.Add(backoff(4))
}

// roomAgain records a prompt stored after the store was found full.
func (p *publisher) roomAgain() {
	p.mu.Lock()
	since := p.fullSince
	p.fullSince = time.Time{}
	p.mu.Unlock()
	if !since.IsZero() && p.log != nil {
		p.log.Info("the JetStream store has room again: queuing goes on", "run", p.run, "waited", time.Since(since).Round(time.Second))
	}
}

// newPublisher prepares the publishing of prompts to stream (the prompts
// stream, as looked up just before), refused by the server above limit
// bytes.
func newPublisher(js jetstream.JetStream, cfg Config, stream jetstream.Stream, limit int64, m *meter) *publisher {
	var startSeq uint64
	var batch *batchstore.Store
	if stream != nil {
		startSeq = stream.CachedInfo().State.LastSeq
	}
	if stream != nil && !cfg.alone {
		batch = batchstore.New(js, batchstore.Options{Stream: schema.PromptsStream, Logger: cfg.Logger})
	}
	return &publisher{
		js: js, stream: stream, run: cfg.Run, file: cfg.PromptsFile, retries: cfg.Retries, ackTimeout: cfg.AckTimeout,
		startSeq: startSeq, limit: limit, meter: m, batch: batch, log: cfg.Logger,
		slots:    make(chan struct{}, cfg.MaxPending),
		inflight: make(chan *entry, cfg.MaxPending),
		retry:    make(chan *entry, cfg.MaxPending),
		done:     make(chan struct{}),
	}
}

// start runs the collector until finish.
func (p *publisher) start(ctx context.Context) {
	go p.collect(ctx)
}

// add publishes a new prompt once a slot is free, republishing prompts
// due for a retry first. It returns an error only when ctx ends.
func (p *publisher) add(ctx context.Context, e *entry) error {
	if err := p.acquire(ctx); err != nil {
		return err
	}
	p.send(ctx, e)
	return nil
}

// acquire takes a publishing slot once one is free, republishing prompts
// due for a retry first. It returns an error only when ctx ends.
func (p *publisher) acquire(ctx context.Context) error {
	for {
		select {
		case r := <-p.retry:
			p.resend(ctx, r)
			continue
		default:
		}
		select {
		case p.slots <- struct{}{}:
			return nil
		case r := <-p.retry:
			p.resend(ctx, r)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// addAll publishes es in their order: into the group commit together, so
// that they go in one batch, or one after the other on the connection.
// Added one by one, a prompt that finds the group commit idle goes alone,
// and a lone prompt is published on its own after the batch behind it,
// which would take the longest prompt of a longest-first queue out of
// its place. es must be fewer than the publishing slots.
func (p *publisher) addAll(ctx context.Context, es []*entry) error {
	for range es {
		if err := p.acquire(ctx); err != nil {
			return err
		}
	}
	if p.batch == nil || p.batch.Off() {
		for _, e := range es {
			p.send(ctx, e)
		}
		return nil
	}
	msgs := make([]*nats.Msg, len(es))
	for i, e := range es {
		msgs[i] = batchstore.Copy(e.msg)
		msgs[i].Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	}
	now := time.Now()
	for i, t := range p.batch.SubmitAll(msgs) {
		es[i].ticket, es[i].future, es[i].sentAt = t, nil, now
		p.inflight <- es[i]
	}
	return nil
}

// finish waits until every prompt added is settled, serving retries
// meanwhile, and stops the collector. If ctx ends first, prompts not yet
// settled are counted as failed.
func (p *publisher) finish(ctx context.Context) {
	held := 0
wait:
	for held < cap(p.slots) {
		select {
		case r := <-p.retry:
			p.resend(ctx, r)
		case p.slots <- struct{}{}:
			held++ // holding every slot means nothing is outstanding
		case <-ctx.Done():
			break wait
		}
	}
	close(p.inflight)
	<-p.done
	if p.batch != nil {
		p.batch.Close()
		p.log.Info("group commit: stored in batches", "run", p.run, "prompts", p.batch.Batched(), "batches", p.batch.Batches())
	}
	for {
		select {
		case r := <-p.retry:
			p.fail(r, interruptedReason(r, ctx.Err()))
		default:
			return
		}
	}
}

// resend waits out a prompt's backoff and publishes it again.
func (p *publisher) resend(ctx context.Context, e *entry) {
	if err := ctx.Err(); err != nil {
		p.fail(e, interruptedReason(e, err))
		return
	}
	if wait := time.Until(e.retryAt); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			p.fail(e, interruptedReason(e, ctx.Err()))
			return
		}
	}
	p.send(ctx, e)
}

// send makes one publish attempt: into the group commit, or on its own
// once a batch has not stored the prompt. The message is copied for each
// attempt: the client library sets headers on the message it is given.
func (p *publisher) send(ctx context.Context, e *entry) {
	if p.batch != nil && !e.alone && !p.batch.Off() {
		m := batchstore.Copy(e.msg)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		e.ticket, e.future, e.sentAt = p.batch.Submit(m), nil, time.Now()
		p.inflight <- e
		return
	}
	e.attempts++
	f, err := p.js.PublishMsgAsync(batchstore.Copy(e.msg),
		jetstream.WithExpectLastSequencePerSubject(0),
		jetstream.WithStallWait(p.ackTimeout))
	if err != nil {
		p.settle(ctx, e, nil, err)
		return
	}
	e.future, e.sentAt = f, time.Now()
	p.inflight <- e
}

// collect waits for the acknowledgement of each publish, in publishing
// order. Each publish has its own deadline, ackTimeout after it was sent,
// so a publish left unanswered delays the ones behind it only until their
// own deadlines, which come no earlier than its own: when a stream leader
// drops every publish, all pending ones time out together, ackTimeout
// after they were sent.
func (p *publisher) collect(ctx context.Context) {
	defer close(p.done)
	timer := time.NewTimer(p.ackTimeout)
	timer.Stop()
	for e := range p.inflight {
		if e.ticket != nil {
			p.settleBatched(ctx, e, timer)
			continue
		}
		ack, err := p.await(ctx, e, timer)
		p.settle(ctx, e, ack, err)
	}
}

// settleBatched decides what becomes of a prompt sent to the group commit:
// stored with its batch, or handed back to be published on its own at
// once. A batch the server refused stored nothing, so that costs no
// attempt; one of unknown fate counts as an attempt, so that finding the
// prompt stored afterwards is checked against this produce.
func (p *publisher) settleBatched(ctx context.Context, e *entry, timer *time.Timer) {
	o := batchstore.MaybeStored
	select {
	case <-e.ticket.Done():
		o, _ = e.ticket.Outcome()
	default:
		if wait := time.Until(e.sentAt.Add(p.ackTimeout)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-e.ticket.Done():
				o, _ = e.ticket.Outcome()
			case <-timer.C:
			case <-ctx.Done():
			}
			timer.Stop()
		}
	}
	e.ticket, e.alone = nil, true
	switch {
	case o == batchstore.Stored:
		e.attempts++
		p.roomAgain()
		p.succeed(e, false)
	case ctx.Err() != nil:
		p.fail(e, interruptedReason(e, ctx.Err()))
	default:
		if o == batchstore.MaybeStored {
			e.attempts++
		}
		e.retryAt = time.Now()
		p.retry <- e
	}
}

// await returns the answer to e's latest publish, a timeout once its
// deadline has passed, or the context's error. timer is the collector's,
// stopped on return.
func (p *publisher) await(ctx context.Context, e *entry, timer *time.Timer) (*jetstream.PubAck, error) {
	// An answer that has already arrived counts, even past the deadline.
	select {
	case ack := <-e.future.Ok():
		return ack, nil
	case err := <-e.future.Err():
		return nil, err
	default:
	}
	wait := time.Until(e.sentAt.Add(p.ackTimeout))
	if wait <= 0 {
		return nil, &ackTimeoutError{p.ackTimeout}
	}
	timer.Reset(wait)
	defer timer.Stop()
	select {
	case ack := <-e.future.Ok():
		return ack, nil
	case err := <-e.future.Err():
		return nil, err
	case <-timer.C:
		return nil, &ackTimeoutError{p.ackTimeout}
	case <-ctx.Done():
		// Take an answer that has already arrived before giving up.
		select {
		case ack := <-e.future.Ok():
			return ack, nil
		case err := <-e.future.Err():
			return nil, err
		default:
			return nil, ctx.Err()
		}
	}
}

// settle decides what becomes of a prompt after a publish attempt: the one
// place where every outcome is handled.
func (p *publisher) settle(ctx context.Context, e *entry, ack *jetstream.PubAck, err error) {
	v := classify(ack, err)
	if v == retry && ctx.Err() != nil {
		p.fail(e, interruptedReason(e, ctx.Err()))
		return
	}
	if v == retry && e.attempts >= p.retries {
		v = permanent
	}
	if v == noRoom {
		p.waitRoom(e, err)
		p.retry <- e
		return
	}
	switch v {
	case stored:
		p.roomAgain()
		p.succeed(e, false)
	case alreadyThere:
		p.succeed(e, !(e.attempts > 1 && p.storedByThisProduce(e, ack)))
	case retry:
		e.retryAt = time.Now().Add(backoff(e.attempts))
		p.retry <- e
	default:
		p.fail(e, p.failureReason(e, err))
	}
}

// storedByThisProduce tells, for a retried prompt found already stored,
// whether an earlier attempt of this produce stored it (its acknowledgement
// was lost) rather than an earlier produce: so it is when the stored
// message is newer than the stream's last message when this produce
// started. The server answers a repeat with the stored sequence only when
// it recognises the message id; otherwise the sequence is looked up.
func (p *publisher) storedByThisProduce(e *entry, ack *jetstream.PubAck) bool {
	if ack != nil {
		return ack.Sequence > p.startSeq
	}
	if p.stream == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	m, err := p.stream.GetLastMsgForSubject(ctx, e.msg.Subject)
	if err != nil {
		return false // counted as already queued, which it is in any case
	}
	return m.Sequence > p.startSeq
}

func (p *publisher) succeed(e *entry, already bool) {
	p.mu.Lock()
	if already {
		p.already += e.count()
	} else {
		p.published += e.count()
	}
	p.mu.Unlock()
	p.meter.queued(already, e.count())
	<-p.slots
}

// count is how many units the entry's message queues: its samples.
func (e *entry) count() int { return max(e.units, 1) }

func (p *publisher) fail(e *entry, reason string) {
	p.mu.Lock()
	p.nFailed += e.count()
	if len(p.failed) < MaxProblems {
		p.failed = append(p.failed, Problem{File: p.file, Line: e.line, Reason: reason})
	}
	p.mu.Unlock()
	<-p.slots
}

func (p *publisher) failureReason(e *entry, err error) string {
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return oversizeReason(e.id, payloadSize(e.msg), p.limit)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return interruptedReason(e, err)
	}
	return fmt.Sprintf("%s not published after %d %s: %v", e.name(), e.attempts, plural(e.attempts, "attempt", "attempts"), err)
}

func interruptedReason(e *entry, err error) string {
	return fmt.Sprintf("%s not confirmed before produce stopped (%v)", e.name(), err)
}

// name names the prompt, and its sample when it is not the first.
func (e *entry) name() string {
	if e.count() > 1 {
		return fmt.Sprintf("prompt %q samples %d to %d", dataset.Truncate(e.id, 60), e.sample, e.sample+e.count()-1)
	}
	if e.sample > 0 {
		return fmt.Sprintf("prompt %q sample %d", dataset.Truncate(e.id, 60), e.sample)
	}
	return fmt.Sprintf("prompt %q", dataset.Truncate(e.id, 60))
}

// results returns the counts and failures once finish has returned.
func (p *publisher) results() (published, already, failed int, problems []Problem) {
	p.mu.Lock()
	defer p.mu.Unlock()
	slices.SortFunc(p.failed, func(a, b Problem) int { return cmp.Compare(a.Line, b.Line) })
	return p.published, p.already, p.nFailed, p.failed
}
