package throughput

import (
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// strandedRun is 40 prompts: worker a answers one a second for 30 s,
// worker b holds 3 and goes silent at 10 s; stopping marks b's last
// heartbeat as a worker's that stops.
func strandedRun(ackWait time.Duration, stopping bool) *Estimator {
	e := New(Config{Run: "r", Total: 40, AckWait: ackWait}, t0)
	for sec := 0.0; sec <= 30; sec++ {
		e.Heartbeat(beat("a", sec, int64(100*sec), 50, 60))
		if sec <= 10 {
			hb := beat("b", sec, int64(50*sec), 30, 40, 50)
			hb.Paused = stopping && sec == 10
			if hb.Paused {
				hb.PausedReason = schema.PausedStopping
			}
			e.Heartbeat(hb)
		}
		e.Completed(at(sec), Single(100, false))
	}
	return e
}

// The ETA is no earlier than the return of the prompts a silent worker
// held: b, silent for 20 s at 30 s, has them back 40 s later with an
// AckWait of 60 s.
func TestETAWaitsForStrandedPrompts(t *testing.T) {
	base := strandedRun(0, false).Snapshot(at(30))
	if base.ETASec < 0 || base.ETASec >= 40 {
		t.Fatalf("the run without the AckWait has ETA %v: want one under 40 s for this test to mean anything", base.ETASec)
	}
	s := strandedRun(time.Minute, false).Snapshot(at(30))
	if s.ETASec != 40 || s.ETALowSec != 40 || s.ETAHighSec < 40 {
		t.Errorf("ETA %v (%v-%v), want 40 s: b's prompts are back then", s.ETASec, s.ETALowSec, s.ETAHighSec)
	}
	if s.Stranded != 3 || s.StrandedBackSec != 40 {
		t.Errorf("event says %d stranded, back in %v s; want b's 3, back in 40 s", s.Stranded, s.StrandedBackSec)
	}
	// A worker that said it stops handed its prompts back.
	if s := strandedRun(time.Minute, true).Snapshot(at(30)); s.ETASec != base.ETASec {
		t.Errorf("ETA %v with a worker that stopped, want %v", s.ETASec, base.ETASec)
	}
	// Past the AckWait they are back.
	e := strandedRun(time.Minute, false)
	e.Heartbeat(beat("a", 71, 7100, 50))
	if back, held := e.strandedBack(at(71)); back != 0 || held != 0 {
		t.Errorf("%d stranded for %v after the AckWait, want none", held, back)
	}
	if s := e.Snapshot(at(71)); s.Stranded != 0 || s.StrandedBackSec != 0 {
		t.Errorf("event after the AckWait says %d stranded, back in %v s; want none", s.Stranded, s.StrandedBackSec)
	}
	// Set later, as the aggregator learns it from the consumer.
	e = strandedRun(0, false)
	e.SetAckWait(time.Minute)
	if s := e.Snapshot(at(30)); s.ETASec != 40 {
		t.Errorf("ETA %v after SetAckWait, want 40", s.ETASec)
	}
}

func TestHoldETALeavesUnknownAlone(t *testing.T) {
	s := schema.Throughput{ETASec: -1, ETALowSec: -1, ETAHighSec: -1}
	holdETA(&s, 30)
	if s.ETASec != -1 || s.ETALowSec != -1 || s.ETAHighSec != -1 {
		t.Errorf("unknown ETA changed: %+v", s)
	}
}
