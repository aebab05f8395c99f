package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker"
)

func TestStoreDirIsRequired(t *testing.T) {
	_, err := broker.Start(broker.Config{})
	if err == nil || !strings.Contains(err.Error(), "store directory is required") {
		t.Fatalf("Start without a store = %v", err)
	}
}

// What was stored survives a restart on the same store: `aerie run`
// resumes on exactly this.
func TestStoreSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	s, err := broker.Start(broker.Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2<<20) // over NATS's 1 MiB default, under aerie's 8 MiB
	if _, err := js.Publish(ctx, "s.1", big); err != nil {
		t.Fatalf("publish 2 MiB: %v", err)
	}
	nc.Close()
	s.Shutdown()

	s, err = broker.Start(broker.Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, err = nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("after restart the stream holds %d messages, want 1", n)
	}
}
