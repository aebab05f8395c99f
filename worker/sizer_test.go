package worker_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// busySim is a simulator of `slots` running sequences whose answers take
// about four seconds each, spread so that they end one by one, as a
// server's do: a worker keeps it full for the length of a test however
// busy the machine.
func busySim(t *testing.T, slots int) string {
	return simtest.Serve(t, simulator.Config{Model: "test-model", MaxNumSeqs: slots, OutputMedian: 100, OutputSigma: 0.5, ReasoningShare: -1})
}

// An automatic window grows from a small start until the server's 64
// slots are busy with a small queue, and settles there.
func TestAutoWindowFollowsTheServer(t *testing.T) {
	const slots = 64
	b := setup(t, 2000, provision.Options{})
	w, _ := b.start(t, worker.Config{Window: 8, AutoWindow: true, WindowPoll: 100 * time.Millisecond}, busySim(t, slots))
	// 64 running and the allowance of 4 waiting; a reading taken while a
	// finished request's slot is between two prompts may show a little
	// less, never a second queue.
	settled := func() bool { n := w.Stats().Window; return n >= slots && n <= slots+8 }
	brokertest.Eventually(t, time.Minute, settled, "the window to settle near %d", slots)
	for range 2 {
		// It stays there while the server turns its batch over.
		done := w.Stats().Completed
		brokertest.Eventually(t, time.Minute, func() bool { return w.Stats().Completed >= done+slots }, "a batch to finish")
		brokertest.Eventually(t, 10*time.Second, settled, "the window to stay near %d", slots)
	}
}

// Two workers with automatic windows on one server of 64 slots, as when
// a second worker is started against the same vLLM: each reads the same
// load, so both grow into the same free slots. Together their windows
// settle at the server's slots and one allowance of 4 (each gives up its
// share of a queue), not an allowance each, and neither is squeezed out.
func TestAutoWindowsShareOneServer(t *testing.T) {
	const slots = 64
	b := setup(t, 4000, provision.Options{})
	url := busySim(t, slots)
	cfg := worker.Config{Window: 8, AutoWindow: true, WindowPoll: 100 * time.Millisecond}
	cfg.Name = "w1"
	w1, _ := b.start(t, cfg, url)
	cfg.Name = "w2"
	w2, _ := b.start(t, cfg, url)
	settled := func() bool {
		n1, n2 := w1.Stats().Window, w2.Stats().Window
		return n1+n2 >= slots && n1+n2 <= slots+6 && min(n1, n2) >= 8
	}
	brokertest.Eventually(t, time.Minute, settled, "the two windows to settle near %d together", slots)
	for range 2 {
		done := w1.Stats().Completed + w2.Stats().Completed
		brokertest.Eventually(t, time.Minute, func() bool { return w1.Stats().Completed+w2.Stats().Completed >= done+slots }, "a batch to finish")
		brokertest.Eventually(t, 10*time.Second, settled, "the two windows to stay near %d together", slots)
	}
}

// An automatic window never goes above --max-window, however many free
// slots the server has.
func TestAutoWindowKeepsToItsMax(t *testing.T) {
	b := setup(t, 2000, provision.Options{})
	w, stop := b.start(t, worker.Config{Window: 4, AutoWindow: true, MaxWindow: 40, WindowPoll: 20 * time.Millisecond}, busySim(t, 64))
	brokertest.Eventually(t, 20*time.Second, func() bool { return w.Stats().Window == 40 }, "the window to reach its max")
	stop()
	if s := w.Stats(); s.Window != 40 || s.MaxGenerating > 40 {
		t.Errorf("window %d, %d requests at once; want 40 and at most 40", s.Window, s.MaxGenerating)
	}
}

// A backend that serves no metrics keeps the fixed window, with one
// warning.
func TestAutoWindowFallsBackWithoutMetrics(t *testing.T) {
	b := setup(t, 20, provision.Options{})
	_, url := newFakeLLM(t, &fakeLLM{})
	warned := &countingHandler{match: "--window auto: the backend serves no vLLM load metrics at /metrics; keeping a fixed window"}
	w, _ := b.start(t, worker.Config{Window: 7, AutoWindow: true, WindowPoll: 10 * time.Millisecond, Logger: slog.New(warned)}, url)
	b.waitSettled(t, 20*time.Second)
	brokertest.Eventually(t, 10*time.Second, func() bool { return warned.n.Load() > 0 }, "the warning")
	if n := warned.n.Load(); n != 1 {
		t.Errorf("warned %d times, want once", n)
	}
	if s := w.Stats(); s.Window != 7 || s.MaxGenerating > 7 {
		t.Errorf("window %d, %d requests at once; want the fixed 7", s.Window, s.MaxGenerating)
	}
}
