package provision_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// smallStore starts a server whose JetStream store holds maxStore
// bytes, and connects to it.
func smallStore(t *testing.T, maxStore int64) jetstream.JetStream {
	t.Helper()
	_, js := brokertest.Connect(t, brokertest.StartSmall(t, maxStore))
	return js
}

// On a store too small for the events stream's 1 GiB, provisioning
// gives it an eighth of what the store can reserve and says so, and the
// other streams are made.
func TestEventsFitASmallStore(t *testing.T) {
	js := smallStore(t, 300<<20)
	var logs logtest.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := provision.Streams(ctx, js, provision.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatalf("provision on a 300 MiB store: %v", err)
	}
	st, err := js.Stream(ctx, schema.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != 32<<20 {
		t.Errorf("events MaxBytes %d, want 32 MiB: an eighth of the 256 MiB the store could reserve", got)
	}
	if !strings.Contains(logs.String(), "the JetStream store is small") {
		t.Errorf("no warning:\n%s", logs.String())
	}
	for _, name := range []string{schema.PromptsStream, schema.ResultsStream, schema.DeadStream, schema.AdvisoriesStream} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("stream %s: %v", name, err)
		}
	}
	// Provisioning again leaves it as it is.
	if err := provision.Streams(ctx, js, provision.Options{}); err != nil {
		t.Fatal(err)
	}

	// A store that cannot reserve even the least says what to do.
	js = smallStore(t, 8<<20)
	err = provision.Streams(ctx, js, provision.Options{})
	if err == nil || !strings.Contains(err.Error(), "free space with aerie runs rm, or give the server more") {
		t.Errorf("provision on an 8 MiB store: %v, want what to do", err)
	}
}
