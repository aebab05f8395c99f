package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/natsdial"
)

// delivery is one delivery of a prompt message to this worker. It sends
// progress acks from the moment it arrives until it is settled, so that
// neither a long answer nor a slow results stream lets AckWait hand the
// prompt to a second worker; every settling call stops them first.
type delivery struct {
	msg jetstream.Msg
	// attempt is JetStream's delivery count of this delivery (from 1).
	attempt int
	// seq is the prompt message's stream sequence.
	seq      uint64
	progress *progressAcks
	// lane is the run the prompt belongs to.
	lane *lane
	// replies ends the wait for a confirmation that a lost connection
	// took with it (see natsdial.Replies); nil waits out the timeout.
	replies *natsdial.Replies
}

// progressAcks tells JetStream every AckWait/3 that a message is still
// being worked on. It holds a timer, not a goroutine: a worker holds
// hundreds of prompts, most of them settled long before their first
// progress ack is due. The zero value is not usable; see startProgress.
type progressAcks struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

// startProgress sends progress acks for msg until stop is called.
func startProgress(l *lane, msg jetstream.Msg) *progressAcks {
	every := l.ackWait / 3
	if every <= 0 {
		every = 10 * time.Second
	}
	p := &progressAcks{}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t = time.AfterFunc(every, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.stopped {
			return
		}
		if err := msg.InProgress(); err != nil {
			l.log.Warn("progress ack failed", "subject", msg.Subject(), "err", err)
		}
		p.t.Reset(every)
	})
	return p
}

// stop ends the progress acks; once it returns none is sent any more.
// It may be called more than once.
func (p *progressAcks) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.t.Stop()
}

// nak hands the prompt back, to be delivered again after delay (at once
// when zero).
func (d *delivery) nak(delay time.Duration, log *slog.Logger) {
	d.progress.stop()
	var err error
	if delay > 0 {
		err = d.msg.NakWithDelay(delay)
	} else {
		err = d.msg.Nak()
	}
	if err != nil {
		log.Warn("nak failed; the prompt comes back after AckWait", "err", err)
	}
}

// term stops delivery of the prompt for good.
func (d *delivery) term(reason string, log *slog.Logger) {
	d.progress.stop()
	if err := d.msg.TermWithReason(reason); err != nil {
		log.Warn("terminate failed after the outcome was stored; a redelivery finds it and settles at once", "err", err)
	}
}

// ack acknowledges the prompt and waits for the server to confirm,
// retrying for a while: during a cluster leader change acks fail for a
// few seconds, and a lost ack means the prompt is delivered again (a
// redelivery then finds the stored result and is acknowledged without
// being generated).
func (d *delivery) ack(ctx context.Context) error {
	d.progress.stop()
	var err error
	for i := 1; i <= 8; i++ {
		actx, cancel := d.replies.Wait(context.WithoutCancel(ctx), 5*time.Second)
		err = d.msg.DoubleAck(actx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(retryDelay(i, 200*time.Millisecond, 5*time.Second)):
		}
	}
	return err
}
