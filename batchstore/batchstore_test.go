package batchstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/batchstore"
	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/provision"
)

// setup starts a server that fsyncs every write, as aerie's does, and
// creates a once-per-subject stream over "t.>", taking atomic batches
// when atomic is set.
func setup(t testing.TB, atomic bool) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	s, err := broker.Start(broker.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage,
		MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
		AllowAtomicPublish: atomic,
	})
	if err != nil {
		t.Fatal(err)
	}
	return js, st
}

// msg is a message for subject t.<key> with id and the expectation that
// the subject is empty, as aerie's stores send them.
func msg(key, id string) *nats.Msg {
	m := nats.NewMsg("t." + key)
	m.Data = []byte("answer " + id)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	return m
}

func msgs(n int, prefix string) []*nats.Msg {
	out := make([]*nats.Msg, n)
	for i := range out {
		out[i] = msg(fmt.Sprint(i), prefix+fmt.Sprint(i))
	}
	return out
}

func outcomes(t *testing.T, ts []*batchstore.Ticket) map[batchstore.Outcome]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := map[batchstore.Outcome]int{}
	for _, tk := range ts {
		o, _ := tk.Wait(ctx)
		got[o]++
	}
	return got
}

func count(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestMessagesSubmittedTogetherAreStoredAsOneBatch(t *testing.T) {
	js, st := setup(t, true)
	s := batchstore.New(js, batchstore.Options{Stream: "T"})
	defer s.Close()
	got := outcomes(t, s.SubmitAll(msgs(300, "a")))
	if got[batchstore.Stored] != 300 {
		t.Fatalf("outcomes %v, want 300 stored", got)
	}
	if n := count(t, st); n != 300 {
		t.Fatalf("stream holds %d messages, want 300", n)
	}
	if b, n := s.Batches(), s.Batched(); b != 1 || n != 300 {
		t.Fatalf("%d messages in %d batches, want 300 in 1", n, b)
	}
}

func TestBatchesAreBoundedInMessagesAndBytes(t *testing.T) {
	js, st := setup(t, true)
	s := batchstore.New(js, batchstore.Options{MaxMsgs: 10, MaxBytes: 1 << 20, InFlight: 1})
	defer s.Close()
	got := outcomes(t, s.SubmitAll(msgs(25, "a")))
	// 10, 10 and 5: the last batch of 5 is still a batch.
	if got[batchstore.Stored] != 25 || s.Batches() != 3 || s.Batched() != 25 {
		t.Fatalf("outcomes %v, %d in %d batches, want 25 stored in 3", got, s.Batched(), s.Batches())
	}
	big := msgs(3, "b")
	for i, m := range big {
		m.Subject = fmt.Sprintf("t.big%d", i)
		m.Data = make([]byte, 600<<10)
	}
	// Two of 600 KiB exceed 1 MiB: each goes alone, as a plain publish.
	if got := outcomes(t, s.SubmitAll(big)); got[batchstore.NotStored] != 3 {
		t.Fatalf("large messages: outcomes %v, want each handed back", got)
	}
	if n := count(t, st); n != 25 {
		t.Fatalf("stream holds %d messages, want 25", n)
	}
}

func TestLoneMessageIsHandedBack(t *testing.T) {
	js, _ := setup(t, true)
	s := batchstore.New(js, batchstore.Options{})
	defer s.Close()
	o, err := s.Submit(msg("x", "x")).Wait(context.Background())
	if o != batchstore.NotStored || err != nil {
		t.Fatalf("lone message: %v, %v; want not stored, to go as a plain publish", o, err)
	}
}

// One message whose subject is taken (a redelivered prompt whose answer
// is stored) or whose id was seen sinks its whole batch: nothing of it is
// stored, and every message is handed back to be stored on its own.
func TestBatchWithAStoredMessageIsRefusedWhole(t *testing.T) {
	for _, tc := range []struct{ name, id string }{
		{"same subject, new id", "new"},
		{"same id", "first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js, st := setup(t, true)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := js.PublishMsg(ctx, msg("5", "first")); err != nil {
				t.Fatal(err)
			}
			s := batchstore.New(js, batchstore.Options{})
			defer s.Close()
			batch := msgs(10, "a")
			batch[5] = msg("5", tc.id)
			ts := s.SubmitAll(batch)
			if got := outcomes(t, ts); got[batchstore.NotStored] != 10 {
				t.Fatalf("outcomes %v, want all 10 handed back", got)
			}
			if _, err := ts[0].Outcome(); err == nil {
				t.Fatal("a refused batch carries the server's error")
			}
			if n := count(t, st); n != 1 {
				t.Fatalf("stream holds %d messages, want only the first", n)
			}
			if s.Off() {
				t.Fatal("a refused batch must not turn batching off")
			}
		})
	}
}

// A stream made without allow_atomic (by an older aerie, or on a server
// that cannot) turns batching off with one warning.
func TestStreamWithoutAtomicPublishTurnsBatchingOff(t *testing.T) {
	js, st := setup(t, false)
	var logs logtest.Buffer
	s := batchstore.New(js, batchstore.Options{Stream: "T", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	if got := outcomes(t, s.SubmitAll(msgs(10, "a"))); got[batchstore.NotStored] != 10 {
		t.Fatalf("outcomes %v, want all handed back", got)
	}
	if !s.Off() {
		t.Fatal("batching still on")
	}
	if got := outcomes(t, s.SubmitAll(msgs(10, "b"))); got[batchstore.NotStored] != 10 {
		t.Fatalf("after: outcomes %v, want all handed back", got)
	}
	if n := strings.Count(logs.String(), "does not take atomic batches"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}
	if n := count(t, st); n != 0 {
		t.Fatalf("stream holds %d messages, want none", n)
	}
}

// Many callers at once, each storing on its own what the store hands
// back: every message is stored exactly once.
func TestConcurrentCallersEachStoredOnce(t *testing.T) {
	js, st := setup(t, true)
	s := batchstore.New(js, batchstore.Options{})
	const n = 400
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := msg(fmt.Sprint(i%300), fmt.Sprint(i)) // 100 subjects asked twice
			o, _ := s.Submit(m).Wait(context.Background())
			if o == batchstore.Stored {
				return
			}
			_, err := js.PublishMsg(context.Background(), m)
			if err != nil && !provision.IsAlreadyStored(err) {
				t.Errorf("plain publish: %v", err)
			}
		}()
	}
	wg.Wait()
	s.Close()
	if c := count(t, st); c != 300 {
		t.Fatalf("stream holds %d messages, want 300", c)
	}
	if o, _ := s.Submit(msg("z", "z")).Wait(context.Background()); o != batchstore.NotStored {
		t.Fatalf("after Close: %v, want not stored", o)
	}
}
