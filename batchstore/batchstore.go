// Package batchstore stores messages in a JetStream stream by group
// commit: whatever callers have submitted while the previous batch was
// being stored goes to the server as one atomic batch, which a server
// with `sync_interval: always` writes with one fsync instead of one per
// message. Batch size follows load: a lone message waits for nothing and
// goes on its own, a burst of hundreds shares one fsync.
//
// The atomic batch is all or nothing: when one message's check fails (its
// Nats-Msg-Id was seen, its subject is not empty as
// Nats-Expected-Last-Subject-Sequence: 0 demands) the server stores none
// of the batch. The store then hands each message back to its caller, who
// stores it on its own and learns, message by message, which was already
// stored. A stream that does not allow atomic publish, or a server too old
// to know it, turns batching off for the life of the Store, with one
// warning.
package batchstore

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Defaults for Options.
const (
	// MaxMsgs is the most messages in one batch: nats-server's own limit
	// on an atomic batch.
	MaxMsgs = 1000
	// DefaultMaxBytes bounds the payload of one batch, so that a burst of
	// large messages is not held in the client's buffer all at once.
	DefaultMaxBytes = 8 << 20
	// DefaultInFlight is how many batches may be committing at once. One:
	// the next batch fills while one is being stored, and the server
	// commits a stream's batches one at a time anyway; two or four in
	// flight made smaller batches and measured slower end to end. The
	// server allows 50 per stream.
	DefaultInFlight = 1
	// DefaultTimeout bounds the wait for a batch's acknowledgement: the
	// server abandons a batch it has not seen committed in 10 seconds.
	DefaultTimeout = 10 * time.Second
)

// Options tune a Store. The zero value gives the defaults above.
type Options struct {
	// Stream names the stream the messages go to, for the log.
	Stream string
	// MaxMsgs bounds messages per batch; zero (or more than MaxMsgs)
	// means MaxMsgs.
	MaxMsgs int
	// MaxBytes bounds the summed size of a batch's messages; zero means
	// DefaultMaxBytes. A message larger than that goes in a batch alone.
	MaxBytes int
	// InFlight bounds batches being committed at once; zero means
	// DefaultInFlight.
	InFlight int
	// Timeout bounds the wait for one batch's acknowledgement; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Logger receives the one warning that batching is off; nil means
	// slog.Default().
	Logger *slog.Logger
	// Wait bounds the wait for a batch's acknowledgement by Timeout, and
	// may end it sooner (natsdial.Replies.Wait ends it when the
	// connection is back after a loss: the acknowledgement went with
	// it); nil means context.WithTimeout.
	Wait func(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

func (o Options) withDefaults() Options {
	if o.MaxMsgs <= 0 || o.MaxMsgs > MaxMsgs {
		o.MaxMsgs = MaxMsgs
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.InFlight <= 0 {
		o.InFlight = DefaultInFlight
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Wait == nil {
		o.Wait = context.WithTimeout
	}
	return o
}

// Outcome is what became of a submitted message.
type Outcome int

const (
	// Stored: the message was stored as part of a committed batch; its
	// subject holds it.
	Stored Outcome = iota + 1
	// NotStored: nothing of the message was stored (it was alone, its
	// batch was refused, batching is off, or the Store is closed): the
	// caller stores it on its own.
	NotStored
	// MaybeStored: the batch's fate is unknown (no acknowledgement in
	// time, a lost connection, an acknowledgement that is not a batch's):
	// the caller stores the message on its own, which finds it already
	// stored if it was.
	MaybeStored
)

func (o Outcome) String() string {
	switch o {
	case Stored:
		return "stored"
	case NotStored:
		return "not stored"
	case MaybeStored:
		return "maybe stored"
	}
	return "pending"
}

// Ticket is one submitted message awaiting its outcome.
type Ticket struct {
	msg     *nats.Msg
	size    int
	done    chan struct{}
	outcome Outcome
	err     error
}

// Done is closed once the outcome is known.
func (t *Ticket) Done() <-chan struct{} { return t.done }

// Outcome is the message's outcome, and the batch's error unless it was
// stored; valid once Done is closed.
func (t *Ticket) Outcome() (Outcome, error) { return t.outcome, t.err }

// Wait waits for the outcome. If ctx ends first the message may still be
// stored by its batch: the outcome is then MaybeStored with ctx's error.
func (t *Ticket) Wait(ctx context.Context) (Outcome, error) {
	select {
	case <-t.done:
		return t.outcome, t.err
	case <-ctx.Done():
		return MaybeStored, ctx.Err()
	}
}

func (t *Ticket) settle(o Outcome, err error) {
	t.outcome, t.err = o, err
	close(t.done)
}

// Store group-commits messages to one stream. Create it with New and
// Close it when no more messages come.
type Store struct {
	js   jetstream.JetStream
	opts Options

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []*Ticket
	closed bool

	off    atomic.Bool
	warned sync.Once
	// batches and batched count the batches committed and the messages
	// they held: their ratio is how well group commit works under the
	// load seen.
	batches, batched atomic.Int64
	wg               sync.WaitGroup
}

// New starts a Store that publishes through js to the stream that holds
// the subjects of the messages submitted to it. Every message of one
// Store must go to the same stream: an atomic batch lives in one stream.
func New(js jetstream.JetStream, opts Options) *Store {
	s := &Store{js: js, opts: opts.withDefaults()}
	s.cond = sync.NewCond(&s.mu)
	for range s.opts.InFlight {
		s.wg.Add(1)
		go s.commits()
	}
	return s
}

// Submit queues m to be stored. m must carry its own expectations as
// headers (Nats-Msg-Id, Nats-Expected-Last-Subject-Sequence); the Store
// sends a copy and leaves m as it is, so it can be published again. A
// Store that is closed or has batching off answers NotStored at once.
func (s *Store) Submit(m *nats.Msg) *Ticket {
	return s.SubmitAll([]*nats.Msg{m})[0]
}

// SubmitAll queues msgs together, so that they go in the same batch as
// far as the limits allow, and returns their tickets in order.
func (s *Store) SubmitAll(msgs []*nats.Msg) []*Ticket {
	ts := make([]*Ticket, len(msgs))
	for i, m := range msgs {
		ts[i] = &Ticket{msg: m, size: len(m.Subject) + len(m.Data) + headerSize(m), done: make(chan struct{})}
	}
	s.mu.Lock()
	if s.closed || s.off.Load() {
		s.mu.Unlock()
		settleAll(ts, NotStored, nil)
		return ts
	}
	s.queue = append(s.queue, ts...)
	s.mu.Unlock()
	if len(ts) == 1 {
		s.cond.Signal()
	} else {
		s.cond.Broadcast()
	}
	return ts
}

// Close stores what is queued, waits for every batch in flight and stops.
// Messages submitted afterwards are answered NotStored.
func (s *Store) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cond.Broadcast()
	s.wg.Wait()
}

// Off reports whether batching has been turned off because the stream or
// server cannot store atomic batches.
func (s *Store) Off() bool { return s.off.Load() }

// Batches counts the batches committed so far.
func (s *Store) Batches() int64 { return s.batches.Load() }

// Batched counts the messages stored in those batches (messages that went
// alone are not counted).
func (s *Store) Batched() int64 { return s.batched.Load() }

// commits takes whatever is queued and commits it, until Close.
func (s *Store) commits() {
	defer s.wg.Done()
	for {
		batch := s.take()
		if batch == nil {
			return
		}
		s.commit(batch)
	}
}

// take waits for queued messages and takes as many as one batch holds,
// or returns nil once the Store is closed and empty.
func (s *Store) take() []*Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) == 0 && !s.closed {
		s.cond.Wait()
	}
	if len(s.queue) == 0 {
		return nil
	}
	n, bytes := 1, s.queue[0].size
	for n < len(s.queue) && n < s.opts.MaxMsgs && bytes+s.queue[n].size <= s.opts.MaxBytes {
		bytes += s.queue[n].size
		n++
	}
	batch := make([]*Ticket, n)
	copy(batch, s.queue)
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return batch
}

// commit stores batch as one atomic batch and settles its tickets. A lone
// message is handed back to go as a plain publish, which costs the server
// the same fsync and the client no batch bookkeeping.
func (s *Store) commit(batch []*Ticket) {
	// A message over the server's max_payload would be refused by the
	// client before reaching the server, halfway through the batch: it goes
	// alone, to get the error that says so.
	if limit := int(s.js.Conn().MaxPayload()); limit > 0 {
		batch = slices.DeleteFunc(batch, func(t *Ticket) bool {
			if t.size > limit {
				t.settle(NotStored, nil)
				return true
			}
			return false
		})
	}
	if len(batch) == 0 {
		return
	}
	if len(batch) == 1 || s.off.Load() {
		settleAll(batch, NotStored, nil)
		return
	}
	msgs := make([]*nats.Msg, len(batch))
	for i, t := range batch {
		msgs[i] = Copy(t.msg) // the library writes batch headers into what it sends
	}
	ctx, cancel := s.opts.Wait(context.Background(), s.opts.Timeout)
	defer cancel()
	_, err := jetstreamext.PublishMsgBatch(ctx, s.js, msgs, jetstreamext.BatchFlowControl{AckFirst: false})
	if err == nil {
		s.batches.Add(1)
		s.batched.Add(int64(len(batch)))
		settleAll(batch, Stored, nil)
		return
	}
	o := classify(err)
	if unsupported(err) {
		s.turnOff(err)
	}
	settleAll(batch, o, err)
}

// classify tells, for a batch that failed with err, whether any of it may
// be stored. An error the server answered means the batch was refused
// whole; an acknowledgement that is not a batch's comes from a server that
// stored each message as a plain publish.
func classify(err error) Outcome {
	if errors.Is(err, jetstreamext.ErrInvalidBatchAck) || errors.Is(err, jetstream.ErrInvalidJSAck) {
		return MaybeStored
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return NotStored
	}
	return MaybeStored
}

// unsupported tells whether err means the stream or server cannot store
// aerie's batches at all, so that every later batch would fail the same
// way.
func unsupported(err error) bool {
	if errors.Is(err, jetstreamext.ErrInvalidBatchAck) || errors.Is(err, jetstream.ErrInvalidJSAck) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstreamext.JSErrCodeBatchPublishNotEnabled, jetstreamext.JSErrCodeBatchPublishUnsupportedHeader:
		return true
	}
	return false
}

func (s *Store) turnOff(err error) {
	s.off.Store(true)
	s.warned.Do(func() {
		s.opts.Logger.Warn("stream does not take atomic batches: storing each message on its own, one fsync each; "+
			"`aerie produce` allows atomic publish on aerie's streams where the server supports it (nats-server 2.15.2, the embedded one, does)",
			"stream", s.opts.Stream, "err", err)
	})
	// Hand back what is queued: it would be refused the same way.
	s.mu.Lock()
	queued := s.queue
	s.queue = nil
	s.mu.Unlock()
	settleAll(queued, NotStored, nil)
}

func settleAll(batch []*Ticket, o Outcome, err error) {
	for _, t := range batch {
		t.settle(o, err)
	}
}

// Copy is a message with m's subject, headers and data, its headers
// its own: the client library writes headers into what it sends, and a
// message handed back or published again must not carry them, nor be
// written while the library may still read it.
func Copy(m *nats.Msg) *nats.Msg {
	c := nats.NewMsg(m.Subject)
	c.Data = m.Data
	for k, v := range m.Header {
		c.Header[k] = append([]string(nil), v...)
	}
	return c
}

// headerSize approximates the encoded size of m's headers.
func headerSize(m *nats.Msg) int {
	n := 0
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
