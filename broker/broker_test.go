package broker_test

import (
	"context"
	"errors"
	"net"
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

// A port another process listens on fails the start at once, naming the
// address and what to do, for clients and for routes; the store is left
// unlocked for the next try.
func TestPortInUseFailsAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	store := t.TempDir()
	began := time.Now()
	_, err = broker.Start(broker.Config{StoreDir: store, Port: port})
	var inUse *broker.PortInUseError
	if !errors.As(err, &inUse) || inUse.What != "clients" || !strings.Contains(err.Error(), "another process has it") {
		t.Fatalf("Start on a port in use = %v", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("the error took %v", d)
	}
	_, err = broker.Start(broker.Config{StoreDir: store, Port: -1, Name: "n1", ClusterListen: l.Addr().String(),
		Routes: []string{"nats-route://" + l.Addr().String()}})
	if !errors.As(err, &inUse) || inUse.What != "routes" {
		t.Fatalf("Start with routes on a port in use = %v", err)
	}
	s, err := broker.Start(broker.Config{StoreDir: store, Port: -1})
	if err != nil {
		t.Fatalf("the store stayed locked after the failed starts: %v", err)
	}
	s.Shutdown()
}
