package brokertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
)

// StartSmall is Start for a server whose JetStream store holds at most
// maxStore bytes (max_file_store): for tests of a store that fills.
func StartSmall(t testing.TB, maxStore int64) *broker.Server {
	t.Helper()
	s, err := broker.Start(broker.Config{StoreDir: t.TempDir(), SyncInterval: time.Minute, MaxStore: maxStore})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// FillStore fills the JetStream store of the server js talks to, which
// must be bounded (broker.Config.MaxStore), with a stream of its own,
// until the server refuses a message for want of room. It returns that
// stream: purging it frees the room again.
func FillStore(t testing.TB, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fill, err := Fill(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return fill
}

// Fill is FillStore for a goroutine other than the test's: it returns
// what went wrong instead of failing the test.
func Fill(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	fill, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill"}, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("create the stream that fills the store: %w", err)
	}
	chunk := make([]byte, 256<<10)
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, "fill", chunk); err != nil {
			return fill, nil
		}
		if i > 16<<10 {
			return nil, errors.New("the store never filled: is the server's MaxStore set?")
		}
	}
}
