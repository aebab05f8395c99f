package throughput

import (
	"math"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// stragglerRun is a constant-backend run of 3,000 prompts whose end is
// set by one answer of 60 times the mean, handed out at 90% of the queue.
func stragglerRun(noAges bool) (simConfig, int) {
	const at = 2700
	return simConfig{
		prompts: 3000, workers: 1, window: 200, speed: 60, prefill: 0.005,
		median: tailMean * math.Exp(-1.2*1.2/2), sigma: 1.2, maxTokens: math.MaxInt32,
		heartbeat: 2 * time.Second, snapshotEvery: 5 * time.Second, seed: 7,
		override: func(i int) float64 {
			if i == at {
				return stragglerFactor * tailMean
			}
			return 0
		},
		speedSigma: stragglerSpeedSigma, noAges: noAges,
	}, stragglerFactor * tailMean
}

// Once only the straggler is left, the event says the ETA waits on it,
// with its tokens and how long it has run, and the band holds the end.
func TestStragglerNamed(t *testing.T) {
	cfg, length := stragglerRun(false)
	res := runSim(cfg)
	named, held := 0, 0
	for _, row := range res.rows {
		s := row.snap.Stragglers
		if left := row.snap.Total - row.snap.Completed - row.snap.Failed; s != nil && s.InFlight > left {
			t.Errorf("at %.0f s: waiting on %d answers with %d lines left", row.t, s.InFlight, left)
		}
		if s == nil || s.InFlight != 1 {
			continue
		}
		named++
		if s.LongestTokens <= 0 || s.LongestTokens > length || !(s.LongestSec > 0) {
			t.Fatalf("at %.0f s: waiting on %+v, want the straggler's tokens (at most %d) and age", row.t, *s, length)
		}
		if speed := float64(s.LongestTokens) / s.LongestSec; speed < 60*0.3 || speed > 60*3 {
			t.Errorf("at %.0f s: the straggler's own speed reads %.0f tokens/s, the server's requests run at about 60", row.t, speed)
		}
		if truth := res.end - row.t; row.snap.ETALowSec <= truth && truth <= row.snap.ETAHighSec {
			held++
		}
	}
	if named < 3 {
		t.Fatalf("%d events named the straggler, want the drain's events to (run of %.0f s)", named, res.end)
	}
	if 5*held < 4*named {
		t.Errorf("the band held the end at %d of the %d events that named the straggler, want 80%%", held, named)
	}
}

// A worker older than Heartbeat.InFlightMillis lists tokens only: the
// straggler is still named, without its age, and the ETA still bounds it.
func TestStragglerWithoutAges(t *testing.T) {
	cfg, _ := stragglerRun(true)
	res := runSim(cfg)
	named := 0
	for _, row := range res.rows {
		if s := row.snap.Stragglers; s != nil && s.InFlight == 1 {
			named++
			if s.LongestSec != 0 || s.LongestTokens <= 0 {
				t.Fatalf("at %.0f s: %+v, want tokens and no age", row.t, *s)
			}
		}
	}
	if named == 0 {
		t.Fatal("no event named the straggler")
	}
}

// Before the drain, the event says the end is set by answers still to
// come: no in-flight count.
func TestStragglersStillToCome(t *testing.T) {
	cfg, _ := stragglerRun(false)
	res := runSim(cfg)
	for _, row := range res.rows {
		if row.snap.Phase == schema.PhaseSteady && row.snap.Stragglers != nil {
			if row.snap.Stragglers.InFlight != 0 {
				t.Fatalf("at %.0f s (steady): %+v, want answers still to come", row.t, *row.snap.Stragglers)
			}
			return
		}
	}
	t.Fatal("no steady event had its ETA set by the stragglers")
}

func TestSpeedSpread(t *testing.T) {
	var fs []flight
	for i := range 100 {
		fs = append(fs, flight{tokens: 500, speed: 50 + float64(i)})
	}
	fs = append(fs, flight{tokens: 10}) // no speed of its own yet
	got := speedSpread(fs)
	if len(got) != spreadPoints {
		t.Fatalf("%d factors, want %d", len(got), spreadPoints)
	}
	if got[spreadPoints/2] < 0.99 || got[spreadPoints/2] > 1.01 {
		t.Errorf("median factor %.3f, want 1", got[spreadPoints/2])
	}
	if !(got[0] < 1 && got[len(got)-1] > 1) {
		t.Errorf("factors %v do not spread around 1", got)
	}
	if speedSpread(fs[:minSpread-1]) != nil {
		t.Error("a spread from fewer than minSpread speeds")
	}
}
