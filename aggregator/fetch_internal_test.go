package aggregator

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// A batch of long answers is bounded in bytes, not only in count, so that
// 256 answers of several MiB are never held in memory at once.
func TestFetchIsBoundedInBytes(t *testing.T) {
	const n, size = 24, 1 << 20
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	answer := strings.Repeat("x", size)
	for i := range n {
		data, err := schema.EncodeResult(&schema.Result{Run: "big", ID: string(rune('a' + i)), Content: answer})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, schema.ResultSubject("big", schema.Unit{ID: string(rune('a' + i))}), data); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := provision.ResultsConsumer(ctx, js, "big")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Run: "big", FetchBytes: 1, Logger: slog.New(slog.DiscardHandler)}, js)
	if err != nil {
		t.Fatal(err)
	}
	a.owner = &owner{}
	a.owner.validUntil.Store(time.Now().Add(time.Hour).UnixNano())
	limit := 2 * int(js.Conn().MaxPayload()) // the smallest bound: any one message must fit
	var mu sync.Mutex
	got, largest := 0, 0
	consumeCtx, stop := context.WithCancel(ctx)
	go func() {
		_ = a.consume(consumeCtx, cons, func(msgs []jetstream.Msg) error {
			bytes := 0
			for _, m := range msgs {
				bytes += len(m.Data())
				_ = m.Ack()
			}
			mu.Lock()
			got += len(msgs)
			largest = max(largest, bytes)
			mu.Unlock()
			return nil
		})
	}()
	brokertest.Eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return got == n }, "every result fetched")
	stop()
	mu.Lock()
	defer mu.Unlock()
	if largest > limit {
		t.Errorf("a batch held %d MiB, over the %d MiB bound", largest>>20, limit>>20)
	}
	t.Logf("largest batch %d MiB of %d MiB published (bound %d MiB)", largest>>20, n*size>>20, limit>>20)
}

// Results are written as they arrive, not when the fetch that brings
// them has filled or expired: the last results of a run, fewer than a
// batch, are written at once.
func TestWritesWhileFetchIsOpen(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range []string{"a", "b", "c"} {
		data, err := schema.EncodeResult(&schema.Result{Run: "tail", ID: id, Content: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, schema.ResultSubject("tail", schema.Unit{ID: id}), data); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := provision.ResultsConsumer(ctx, js, "tail")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Run: "tail", Logger: slog.New(slog.DiscardHandler)}, js)
	if err != nil {
		t.Fatal(err)
	}
	a.fetchWait = 10 * time.Second // a fetch that ends is one that was waited out
	a.owner = &owner{}
	a.owner.validUntil.Store(time.Now().Add(time.Hour).UnixNano())
	type write struct{ msgs, waiting int }
	writes := make(chan write, 10)
	consumeCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = a.consume(consumeCtx, cons, func(msgs []jetstream.Msg) error {
			for _, m := range msgs {
				_ = m.Ack()
			}
			info, err := cons.Info(ctx)
			if err != nil {
				t.Error(err)
				return err
			}
			writes <- write{len(msgs), info.NumWaiting}
			return nil
		})
	}()
	got := 0
	for got < 3 {
		select {
		case w := <-writes:
			got += w.msgs
			if w.waiting == 0 {
				t.Errorf("%d results were written only once the fetch that brought them had ended", w.msgs)
			}
		case <-ctx.Done():
			t.Fatalf("%d of 3 results written", got)
		}
	}
}
