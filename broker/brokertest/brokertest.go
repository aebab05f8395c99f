// Package brokertest starts a real embedded NATS server with JetStream for
// tests, in a temporary store that the test removes.
package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/provision"
)

// Start runs a server on a random loopback port with its store in
// t.TempDir(), shut down when the test ends. Writes are flushed on an
// interval rather than fsynced, since a test's store does not outlive it.
func Start(t testing.TB) *broker.Server {
	t.Helper()
	s, err := broker.Start(broker.Config{StoreDir: t.TempDir(), SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Connect opens a TCP client connection to s, closed when the test ends.
func Connect(t testing.TB, s *broker.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return ConnectURL(t, s.ClientURL())
}

// ConnectURL opens a client connection to url and a JetStream context on
// it, the connection closed when the test ends.
func ConnectURL(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Provisioned starts a server, connects, and creates aerie's streams.
func Provisioned(t testing.TB) (*broker.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := Start(t)
	nc, js := Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}
	return s, nc, js
}

// Eventually polls cond every few milliseconds until it returns true, and
// fails the test with msg if that takes longer than timeout. It is how
// tests wait for something to happen without sleeping a guessed time.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
