package natsdial_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/natsdial"
)

// A wait begun while connected ends once the connection is back after
// losing its server: the reply it waited for went with the server. A
// wait begun while disconnected (its request still in the client's
// buffer) keeps its timeout, and so does every wait of a nil Replies.
func TestRepliesEndWaitsTheLostConnectionTook(t *testing.T) {
	port, store := freePort(t), t.TempDir()
	srv, err := broker.Start(broker.Config{StoreDir: store, Port: port, SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := natsdial.WatchReplies(nc)
	defer r.Stop()

	sent, cancelSent := r.Wait(context.Background(), time.Hour)
	defer cancelSent()
	var none *natsdial.Replies
	alone, cancelAlone := none.Wait(context.Background(), time.Hour)
	defer cancelAlone()

	srv.Shutdown()
	brokertest.Eventually(t, 10*time.Second, func() bool { return !nc.IsConnected() }, "the client to see its server go")
	buffered, cancelBuffered := r.Wait(context.Background(), time.Hour)
	defer cancelBuffered()
	if sent.Err() != nil {
		t.Fatal("a wait ended when the connection was lost, before it was back")
	}

	srv, err = broker.Start(broker.Config{StoreDir: store, Port: port, SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	select {
	case <-sent.Done():
		if !errors.Is(sent.Err(), context.Canceled) {
			t.Errorf("the wait ended with %v, want it cancelled", sent.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a wait begun before the loss went on after the connection was back")
	}
	if !nc.IsConnected() {
		t.Error("the wait ended before the connection was back")
	}
	if buffered.Err() != nil || alone.Err() != nil {
		t.Errorf("waits that the loss took nothing from ended: begun while disconnected %v, of a nil Replies %v", buffered.Err(), alone.Err())
	}

	// Once back, waits are bound to the next loss, not the last one.
	again, cancelAgain := r.Wait(context.Background(), time.Hour)
	defer cancelAgain()
	if again.Err() != nil {
		t.Errorf("a wait begun after the reconnect ended at once: %v", again.Err())
	}
}
