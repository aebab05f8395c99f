package batchstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/batchstore"
)

// BenchmarkStore prices a burst of n results of 1 KiB on a server that
// fsyncs every write: stored as one atomic batch through a Store, against
// the same burst published asynchronously message by message (one fsync
// each). It reports milliseconds per burst and messages per second.
func BenchmarkStore(b *testing.B) {
	payload := make([]byte, 1024)
	for _, n := range []int{50, 400, 1000} {
		burst := func(prefix string) []*nats.Msg {
			out := make([]*nats.Msg, n)
			for i := range out {
				m := nats.NewMsg(fmt.Sprintf("t.%s.%d", prefix, i))
				m.Data = payload
				m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s.%d", prefix, i))
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
				out[i] = m
			}
			return out
		}
		b.Run(fmt.Sprintf("batch-%d", n), func(b *testing.B) {
			js, _ := setup(b, true)
			s := batchstore.New(js, batchstore.Options{})
			defer s.Close()
			var took time.Duration
			for i := 0; b.Loop(); i++ {
				msgs := burst(fmt.Sprint(i))
				start := time.Now()
				for _, tk := range s.SubmitAll(msgs) {
					if o, err := tk.Wait(context.Background()); o != batchstore.Stored {
						b.Fatalf("outcome %v: %v", o, err)
					}
				}
				took += time.Since(start)
			}
			report(b, n, took)
		})
		b.Run(fmt.Sprintf("async-%d", n), func(b *testing.B) {
			js, _ := setup(b, true)
			var took time.Duration
			for i := 0; b.Loop(); i++ {
				msgs := burst(fmt.Sprint(i))
				start := time.Now()
				acks := make([]jetstream.PubAckFuture, n)
				for j, m := range msgs {
					f, err := js.PublishMsgAsync(m)
					if err != nil {
						b.Fatal(err)
					}
					acks[j] = f
				}
				for _, f := range acks {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						b.Fatal(err)
					}
				}
				took += time.Since(start)
			}
			report(b, n, took)
		})
	}
}

func report(b *testing.B, n int, took time.Duration) {
	per := took / time.Duration(b.N)
	b.ReportMetric(float64(per.Microseconds())/1000, "ms/burst")
	b.ReportMetric(float64(n)/per.Seconds(), "msgs/s")
}
