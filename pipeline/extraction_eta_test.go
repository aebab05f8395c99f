package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/worker"
)

// TestExtractionETA measures the ETA of hidden-states runs end to end
// (make eta-study): runs of 3,000 samples (lengths lognormal around 300
// tokens, up to 4,000) through the simulator, whose extraction time is
// its prefill, with one worker of window 200. At 10, 25, 50 and 75% of
// each run's true length the ETA is compared with the time the run then
// really had left; the goal, as for generation, is within ±25% or
// inside the band at 80% of the checkpoints or more.
func TestExtractionETA(t *testing.T) {
	if os.Getenv("AERIE_ETA_STUDY") != "1" {
		t.Skip("set AERIE_ETA_STUDY=1 (make eta-study)")
	}
	checkpoints := []float64{0.10, 0.25, 0.50, 0.75}
	var lines []string
	good, all := 0, 0
	for _, seed := range []int64{1, 2, 3} {
		type snap struct {
			at time.Duration
			ev schema.Throughput
		}
		var mu sync.Mutex
		var snaps []snap
		cfg := config(t, fmt.Sprintf("hs-eta-%d", seed), samplesFileSeed(t, 3000, 1000, seed))
		cfg.Task = schema.TaskHiddenStates
		cfg.Extraction = &schema.Extraction{LayerIDs: []int{2, 30, 58, 61}, HiddenSize: 64, DType: "BF16"}
		cfg.Sim = simulator.Config{Speed: 5, VocabSize: 1000, Seed: seed}
		cfg.Workers, cfg.Worker = 1, worker.Config{Window: 200}
		cfg.EventInterval = time.Second
		start := time.Now()
		cfg.OnEvent = func(ev schema.Throughput) {
			mu.Lock()
			snaps = append(snaps, snap{time.Since(start), ev})
			mu.Unlock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		sum, err := pipeline.Run(ctx, cfg)
		cancel()
		if err != nil || !sum.Done {
			t.Fatalf("seed %d: %v, %+v", seed, err, sum)
		}
		mu.Lock()
		var end time.Duration
		for _, s := range snaps {
			if s.ev.Phase == schema.PhaseDone {
				end = s.at
				break
			}
		}
		row := fmt.Sprintf("seed %d, %s:", seed, end.Round(100*time.Millisecond))
		for _, c := range checkpoints {
			at := time.Duration(c * float64(end))
			i := sort.Search(len(snaps), func(i int) bool { return snaps[i].at >= at })
			if i == len(snaps) {
				continue
			}
			s := snaps[i]
			truth := (end - s.at).Seconds()
			eta, low, high := s.ev.ETASec, s.ev.ETALowSec, s.ev.ETAHighSec
			errPct := 100 * (eta/truth - 1)
			inBand := low >= 0 && low <= truth && truth <= high
			ok := eta >= 0 && (errPct >= -25 && errPct <= 25 || inBand)
			all++
			if ok {
				good++
			}
			row += fmt.Sprintf("  %2.0f%%: ETA %.1fs for %.1fs (%+.0f%%, band %.1f-%.1fs%s)", 100*c, eta, truth, errPct, low, high, map[bool]string{true: ", in", false: ""}[inBand])
		}
		mu.Unlock()
		lines = append(lines, row)
	}
	t.Logf("ETA of hidden-states runs (3,000 samples, one worker of window 200):\n%s\n%d of %d checkpoints within ±25%% or inside the band",
		strings.Join(lines, "\n"), good, all)
	if 5*good < 4*all {
		t.Errorf("%d of %d checkpoints within ±25%% or inside the band, want 80%% or more", good, all)
	}
}
