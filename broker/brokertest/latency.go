package brokertest

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
)

// ConnectWithLatency opens a client connection to s through a relay that
// holds back every byte for oneWay in each direction, as a broker on
// another host would: every round trip to the broker (a store, an
// acknowledgement, a pull) takes at least 2*oneWay, while what the
// client does on its own side is unaffected. The relay and the
// connection close when the test ends.
func ConnectWithLatency(t testing.TB, s *broker.Server, oneWay time.Duration) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{target: u.Host, oneWay: oneWay}
	go r.serve(l)
	t.Cleanup(func() {
		l.Close()
		r.close()
	})
	return ConnectURL(t, "nats://"+l.Addr().String(), nats.NoReconnect())
}

// relay forwards the connections accepted on a listener to target,
// delayed.
type relay struct {
	target string
	oneWay time.Duration
	mu     sync.Mutex
	conns  []net.Conn
}

func (r *relay) serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, up)
		r.mu.Unlock()
		go delay(up, c, r.oneWay)
		go delay(c, up, r.oneWay)
	}
}

func (r *relay) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
}

// delay copies src to dst, each chunk written oneWay after it was read
// and in order, until either side closes; it then closes both.
func delay(dst, src net.Conn, oneWay time.Duration) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{time.Now().Add(oneWay), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	defer src.Close()
	defer dst.Close()
	timer := time.NewTimer(0)
	<-timer.C
	for c := range chunks {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			<-timer.C
		}
		if _, err := dst.Write(c.data); err != nil {
			// Closing src ends the reader; what it had read is dropped.
			src.Close()
			for range chunks {
			}
			return
		}
	}
}
