package natsdial

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Replies ends the waits for replies that a lost connection took with
// it. A request written to a server that then dies (a publish waiting
// for its acknowledgement, a confirmed ack) never gets its reply, and
// its caller would wait out its whole timeout, seconds after the client
// is connected again, with its answers ready and nothing stored. Waits
// bounded by Wait end instead as soon as the connection is back, so the
// caller sends again at once; what it sends is deduplicated by the
// server (message ids, expected sequences), so sending twice is safe.
//
// A nil *Replies bounds waits by their timeout alone.
type Replies struct {
	nc *nats.Conn

	mu   sync.Mutex
	back context.Context // ends when the connection is back after a loss
	end  context.CancelFunc

	status chan nats.Status
	done   chan struct{}
}

// WatchReplies starts watching nc; Stop ends it.
func WatchReplies(nc *nats.Conn) *Replies {
	r := &Replies{nc: nc, status: nc.StatusChanged(nats.CONNECTED, nats.CLOSED), done: make(chan struct{})}
	r.back, r.end = context.WithCancel(context.Background())
	go r.watch()
	return r
}

func (r *Replies) watch() {
	defer close(r.done)
	for st := range r.status {
		if st == nats.CLOSED {
			return
		}
		r.mu.Lock()
		r.end()
		r.back, r.end = context.WithCancel(context.Background())
		r.mu.Unlock()
	}
}

// Stop stops watching; waits already bounded keep their timeout.
func (r *Replies) Stop() {
	if r == nil {
		return
	}
	r.nc.RemoveStatusListener(r.status)
	<-r.done
}

// Wait is context.WithTimeout(ctx, d), ended too when the connection is
// back after losing its server, if it was connected when Wait was
// called: a request sent while disconnected waits in the client's
// buffer and is sent once connected, so its reply may well come.
func (r *Replies) Wait(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithTimeout(ctx, d)
	if r == nil || !r.nc.IsConnected() {
		return wctx, cancel
	}
	r.mu.Lock()
	back := r.back
	r.mu.Unlock()
	stop := context.AfterFunc(back, cancel)
	return wctx, func() {
		stop()
		cancel()
	}
}
