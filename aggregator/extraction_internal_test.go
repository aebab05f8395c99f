package aggregator

import (
	"math"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// A hidden-states run's ETA is its tokens left over the pace of the
// last 15 s, its band those tokens over the faster and the slower of
// that pace and the last two minutes', widened by the shares.
func TestExtractionETAFromPace(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	a := &Aggregator{bytesPerToken: 100, tokensTotal: 200_000}
	snap := func(sec, done int) schema.Throughput {
		// Samples of 100 tokens each.
		s := schema.Throughput{Phase: schema.PhaseSteady, Completed: done / 100, MeanCompletionTokens: 100, ETASec: -1, ETALowSec: -1, ETAHighSec: -1}
		a.extractionETA(&s, t0.Add(time.Duration(sec)*time.Second))
		return s
	}
	if s := snap(0, 0); s.ETASec != -1 {
		t.Errorf("with one note the estimator's ETA stays: %v", s.ETASec)
	}
	// 1,000 tokens a second for 60 s, then 2,000 for 30 s.
	for sec := 5; sec <= 60; sec += 5 {
		snap(sec, 1000*sec)
	}
	var s schema.Throughput
	for sec := 65; sec <= 90; sec += 5 {
		s = snap(sec, 60_000+2000*(sec-60))
	}
	// 80,000 tokens left; 2,000 a second lately, 120,000 / 90 s overall.
	near := func(got, want float64) bool { return math.Abs(got-want) < 0.01 }
	if !near(s.ETASec, 40) || !near(s.ETALowSec, 0.85*80_000/2000) || !near(s.ETAHighSec, 1.2*80_000/(120_000.0/90)) {
		t.Errorf("ETA %.2f, band %.2f-%.2f; want 40, 34-72", s.ETASec, s.ETALowSec, s.ETAHighSec)
	}
	// Failed samples' tokens are not left to read.
	s = schema.Throughput{Phase: schema.PhaseSteady, Completed: 1250, Failed: 100, MeanCompletionTokens: 100}
	a.extractionETA(&s, t0.Add(95*time.Second))
	// 65,000 left; 25,000 read in the 15 s since the note at 80 s.
	if !near(s.ETASec, 65_000/(25_000/15.0)) {
		t.Errorf("ETA with 100 failed samples: %.2f", s.ETASec)
	}
	// Notes older than two minutes go, but the last before them.
	for sec := 100; sec <= 400; sec += 5 {
		snap(sec, 130_000)
	}
	if len(a.pace.at) > 26 {
		t.Errorf("%d notes kept for two minutes of notes 5 s apart", len(a.pace.at))
	}
}
