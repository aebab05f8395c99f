package pipeline

import (
	"log/slog"
	"path/filepath"
	"time"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/report"
	"github.com/aerie-dev/aerie/schema"
)

// AggregatorSummary is a run's summary as its aggregator alone knows it,
// for `aerie aggregate --exit-when-done`: the counts, times and overall
// rates of its last event, and the files it wrote. What only workers know
// (time paused, prompts handed back, the backend) is left out. It writes
// the run's report.html first, as `aerie run` does, and names it; a report
// that cannot be written is logged and left out.
func AggregatorSummary(run, dataDir string, a *aggregator.Aggregator, log *slog.Logger) *Summary {
	last := a.Last()
	s := &Summary{
		Run: run, Total: last.Total, Completed: last.Completed, Failed: last.Failed,
		Truncated: last.Truncated, Done: last.Phase == schema.PhaseDone,
		HintedAnswers: last.HintedAnswers, HintRankCorrelation: last.HintRankCorrelation,
		Wall:           time.Duration(last.ElapsedSec * float64(time.Second)),
		RequestsPerSec: last.RequestsPerSecOverall, TokensPerSec: last.TokensPerSecOverall,
		Completions: filepath.Join(a.Dir(), aggregator.CompletionsFile),
		FailedPath:  filepath.Join(a.Dir(), aggregator.FailedFile),
		EventsPath:  filepath.Join(a.Dir(), aggregator.EventsFile),
		Samples:     1, TotalTurns: last.TotalTurns, CompletedTurns: last.CompletedTurns,
	}
	if last.TotalTurns > 0 {
		s.Turns = schema.TurnsAll
		if last.ElapsedSec > 0 {
			s.TurnsPerSec = float64(last.CompletedTurns) / last.ElapsedSec
		}
	}
	path := report.DefaultPath(dataDir, run)
	if _, err := report.WriteFile(path, report.Options{Run: run, Dir: a.Dir()}); err != nil {
		log.Warn("cannot write the run's report; aerie report can write it later", "err", err)
	} else {
		s.Report = path
	}
	return s
}
