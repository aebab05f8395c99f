package flights

import (
	"context"
	"errors"
	"testing"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker/internal/policy"
)

var errCause = errors.New("handed back")

// A flight waits for its first token once sent, streams after it, and
// starts over when sent again.
func TestFlightStates(t *testing.T) {
	f := &Flight{Key: policy.FlightKey{Seq: 1}}
	if v := f.view(); !v.Sent.IsZero() || v.State != policy.FlightWaiting {
		t.Fatalf("before it is sent: %+v", v)
	}
	_, cancel := context.WithCancelCause(context.Background())
	f.Send(cancel)
	f.Streamed(0)
	if v := f.view(); v.Sent.IsZero() || v.State != policy.FlightWaiting {
		t.Fatalf("sent, no token: %+v", v)
	}
	f.Streamed(3)
	f.Streamed(2)
	if v := f.view(); v.State != policy.FlightStreaming || v.Tokens != 5 {
		t.Fatalf("streaming: %+v", v)
	}
	f.Send(cancel)
	if v := f.view(); v.State != policy.FlightWaiting || v.Tokens != 0 {
		t.Fatalf("sent again: %+v", v)
	}
}

// Cancel cancels a sent request only from the states it names, with
// its cause, which the request's own goroutine reads from Ended unless
// its own context ended.
func TestCancel(t *testing.T) {
	var r Registry
	f := &Flight{Key: policy.FlightKey{Seq: 7}, Lane: 1, Unit: schema.Unit{ID: "p"}}
	remove := r.Add(f)
	if _, ok := r.Cancel(f.Key, nil, policy.FlightHandedBack, errCause, policy.FlightWaiting); ok {
		t.Fatal("cancelled a request not sent")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	f.Send(cancel)
	f.Streamed(4)
	if _, ok := r.Cancel(f.Key, nil, policy.FlightHandedBack, errCause, policy.FlightWaiting); ok {
		t.Fatal("cancelled a streaming request from waiting")
	}
	other := func(g *Flight) bool { return g.Lane == 2 }
	if _, ok := r.Cancel(f.Key, other, policy.FlightHedgedAway, policy.ErrHedgeWon, policy.FlightStreaming); ok {
		t.Fatal("cancelled a request its match said no to")
	}
	tokens, ok := r.Cancel(f.Key, nil, policy.FlightHedgedAway, policy.ErrHedgeWon, policy.FlightWaiting, policy.FlightStreaming)
	if !ok || tokens != 4 || !errors.Is(context.Cause(ctx), policy.ErrHedgeWon) {
		t.Fatalf("cancel: %d tokens, %v, cause %v", tokens, ok, context.Cause(ctx))
	}
	ended := errors.New("stream cut")
	if err := f.Ended(ended, false); !errors.Is(err, policy.ErrHedgeWon) || !errors.Is(err, ended) {
		t.Errorf("ended: %v, want the cause and the error", err)
	}
	if err := f.Ended(ended, true); err != ended {
		t.Errorf("ended with the caller's context: %v, want the error alone", err)
	}
	if err := f.Ended(nil, false); err != nil {
		t.Errorf("a success: %v", err)
	}
	remove()
	if _, ok := r.Cancel(f.Key, nil, policy.FlightHandedBack, errCause, policy.FlightHedgedAway); ok {
		t.Error("cancelled a flight removed")
	}
}

// A flight removes itself only: another delivery of the prompt that
// took its place stays.
func TestRemoveOnlyItself(t *testing.T) {
	var r Registry
	key := policy.FlightKey{Seq: 3}
	first, second := &Flight{Key: key}, &Flight{Key: key, Attempt: 2}
	removeFirst := r.Add(first)
	removeSecond := r.Add(second)
	removeFirst()
	if !r.Holds(key, 0) || r.Snapshot()[0].Attempt != 2 {
		t.Fatal("the first delivery removed the second's flight")
	}
	removeSecond()
	if r.Holds(key, 0) {
		t.Fatal("the second delivery's flight stayed")
	}
}

// A snapshot is in key order; a lane's flights and tokens are its own.
func TestSnapshot(t *testing.T) {
	var r Registry
	keys := []policy.FlightKey{{Seq: 9}, {Seq: 2, Kind: policy.HedgeOf}, {Seq: 2, Kind: policy.SampleOf, Sample: 1}, {Seq: 2}, {Seq: 2, Kind: policy.SampleOf}}
	for i, k := range keys {
		f := &Flight{Key: k, Lane: i % 2}
		f.Streamed(10 * (i + 1))
		r.Add(f)
	}
	want := []policy.FlightKey{{Seq: 2}, {Seq: 2, Kind: policy.SampleOf}, {Seq: 2, Kind: policy.SampleOf, Sample: 1}, {Seq: 2, Kind: policy.HedgeOf}, {Seq: 9}}
	for i, f := range r.Snapshot() {
		if f.Key != want[i] {
			t.Fatalf("flight %d is %+v, want %+v", i, f.Key, want[i])
		}
	}
	if n := len(r.Lane(1)); n != 2 {
		t.Errorf("lane 1 has %d flights, want 2", n)
	}
	if got := r.Streamed(0); got != 10+30+50 {
		t.Errorf("lane 0 streamed %d, want 90", got)
	}
}
