package pipeline

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/bytesize"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/status"
)

// Display shows throughput events to a person on a terminal as a progress
// bar. Elsewhere it shows nothing: the aggregator's log line per event is
// the plain-text progress.
type Display struct {
	mu  sync.Mutex
	w   io.Writer
	bar *progressbar.ProgressBar
	tty bool
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// NewDisplay returns a display writing to w.
func NewDisplay(w io.Writer) *Display {
	return &Display{w: w, tty: IsTerminal(w)}
}

// Event shows one throughput event.
func (d *Display) Event(s schema.Throughput) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tty {
		return
	}
	desc := fmt.Sprintf("%-8s %5.2f req/s %6.0f tok/s  in flight %d  failed %d  ETA %s",
		s.Phase, s.RequestsPerSec, s.TokensPerSec, s.InFlight, s.Failed, etaWithBand(s))
	if d.bar == nil {
		d.bar = progressbar.NewOptions(s.Total,
			progressbar.OptionSetWriter(d.w),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetPredictTime(false), // our ETA is in the description
			progressbar.OptionClearOnFinish(),
		)
	}
	d.bar.Describe(desc)
	_ = d.bar.Set(s.Completed + s.Failed)
}

// etaWithBand formats the ETA with its band, "1h10m0s (1h2m0s to
// 1h21m0s)", or the ETA alone when it has no band (unknown, or done).
func etaWithBand(s schema.Throughput) string {
	eta := aggregator.ETA(s.ETASec)
	if s.ETASec < 0 || s.ETALowSec < 0 || s.ETAHighSec <= s.ETALowSec {
		return eta
	}
	return fmt.Sprintf("%s (%s to %s)", eta, aggregator.ETA(s.ETALowSec), aggregator.ETA(s.ETAHighSec))
}

// Close finishes the bar so that what follows starts on a clean line.
func (d *Display) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bar != nil {
		_ = d.bar.Exit()
		fmt.Fprintln(d.w)
	}
}

// Print writes a human summary of a run.
func (s *Summary) Print(w io.Writer) {
	state := "done"
	if !s.Done {
		state = "stopped before the end (run the same command again to resume)"
	}
	fmt.Fprintf(w, "run %s: %s\n", s.Run, state)
	if s.HiddenStatesDir != "" {
		fmt.Fprintf(w, "  samples      %d total, %d extracted, %d failed\n", s.Total, s.Completed, s.Failed)
		fmt.Fprintf(w, "  wall time    %s\n", s.Wall.Round(100*time.Millisecond))
		fmt.Fprintf(w, "  throughput   %.2f samples/s, %.0f input tokens/s, %s of hidden states\n", s.RequestsPerSec, s.TokensPerSec, bytesize.Format(s.HiddenStatesBytes))
		fmt.Fprintf(w, "  dataset      %s (datasets.save_to_disk, with hidden_states/hs_<idx>.safetensors)\n", s.HiddenStatesDir)
		fmt.Fprintf(w, "  failed       %s\n", s.FailedPath)
		fmt.Fprintf(w, "  events       %s\n", s.EventsPath)
		if s.Report != "" {
			fmt.Fprintf(w, "  report       %s\n", s.Report)
		}
		return
	}
	if s.Samples > 1 {
		fmt.Fprintf(w, "  samples      %d total (%d per prompt), %d completed (%d truncated at max_tokens), %d failed\n", s.Total, s.Samples, s.Completed, s.Truncated, s.Failed)
	} else {
		fmt.Fprintf(w, "  prompts      %d total, %d completed (%d truncated at max_tokens), %d failed\n", s.Total, s.Completed, s.Truncated, s.Failed)
	}
	if s.HintedAnswers >= 3 {
		note := status.HintNote(s.HintRankCorrelation, s.HintedAnswers)
		if s.Simulated {
			// A correlation near 0 is the simulator's doing, not the hints'.
			note += " (the simulator draws answer lengths without reading the hints)"
		}
		fmt.Fprintf(w, "  length hints %s\n", note)
	}
	if s.Turns == schema.TurnsAll && s.TotalTurns > 0 {
		fmt.Fprintf(w, "  turns        %d total, %d generated (every assistant turn regenerated)\n", s.TotalTurns, s.CompletedTurns)
	}
	fmt.Fprintf(w, "  wall time    %s\n", s.Wall.Round(100*time.Millisecond))
	if s.Paused > 0 {
		fmt.Fprintf(w, "  paused       %s while the backend was down (%d prompts handed back)\n", s.Paused.Round(100*time.Millisecond), s.HandedBack)
	}
	if s.StoreFull > 0 {
		fmt.Fprintf(w, "  store full   %s waiting for room in the JetStream store (summed over workers)\n", s.StoreFull.Round(100*time.Millisecond))
	}
	if s.Turns == schema.TurnsAll {
		fmt.Fprintf(w, "  throughput   %.2f conversations/s, %.2f turns/s, %.0f output tokens/s\n", s.RequestsPerSec, s.TurnsPerSec, s.TokensPerSec)
	} else {
		fmt.Fprintf(w, "  throughput   %.2f requests/s, %.0f output tokens/s\n", s.RequestsPerSec, s.TokensPerSec)
	}
	if s.Model != "" || s.BackendURL != "" {
		backend := "at " + s.BackendURL
		if s.Simulated {
			backend += " (built-in simulator)"
		}
		fmt.Fprintf(w, "  model        %s %s\n", s.Model, backend)
	}
	fmt.Fprintf(w, "  completions  %s\n", s.Completions)
	fmt.Fprintf(w, "  failed       %s\n", s.FailedPath)
	fmt.Fprintf(w, "  events       %s\n", s.EventsPath)
	if s.Report != "" {
		fmt.Fprintf(w, "  report       %s\n", s.Report)
	}
}
