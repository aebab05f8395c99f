package worker

import (
	"errors"
	"fmt"
	"math"

	"github.com/aerie-dev/aerie/schema"
)

// Validate reports the first configuration problem.
func (c Config) Validate() error {
	set := 0
	for _, b := range []bool{c.Run != "", len(c.Runs) > 0, c.AllRuns} {
		if b {
			set++
		}
	}
	switch {
	case set == 0:
		return errors.New("--run is required: name the run (e.g. --run kimi-k25-25k), or serve several with --runs A,B or --all-runs")
	case set > 1:
		return errors.New("give one of --run, --runs and --all-runs: a worker serves one run, the runs listed, or every run")
	}
	if c.Out != "" && c.Run == "" {
		return errors.New("worker: --out names one run's output directory: give it with --run, not --runs or --all-runs")
	}
	if c.ExitWhenDone && c.Run == "" {
		return errors.New("worker: exiting when done needs one run (--run): a worker of several runs, or of all, serves runs yet to come")
	}
	runs := c.Runs
	if c.Run != "" {
		runs = []string{c.Run}
	}
	for _, r := range runs {
		if err := schema.ValidateRun(r); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	if c.Name != "" && schema.SafeToken(c.Name) != c.Name {
		return fmt.Errorf("worker: name %q may only hold letters, digits, '-' and '_' (it is part of the heartbeat subject)", c.Name)
	}
	if c.Window < 0 {
		return fmt.Errorf("worker: window must be positive, got %d", c.Window)
	}
	if c.MaxWindow < 0 {
		return fmt.Errorf("worker: max window must be positive, got %d", c.MaxWindow)
	}
	if c.HedgeMax < 0 {
		return fmt.Errorf("worker: the most hedges at once must be positive (zero: as many as slots are free), got %d", c.HedgeMax)
	}
	if c.Speed < 0 || math.IsNaN(c.Speed) || math.IsInf(c.Speed, 0) {
		return fmt.Errorf("worker: the backend's speed must be a number of 0 or more, got %v", c.Speed)
	}
	if c.Grace < 0 || c.WindowPoll < 0 || c.Heartbeat < 0 || c.PullWait < 0 || c.RetryBase < 0 || c.RetryMax < 0 || c.OutageRetry < 0 || c.BreakerThreshold < 0 {
		return errors.New("worker: durations must not be negative")
	}
	return nil
}
