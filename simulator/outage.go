package simulator

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// OutageMode is how the server is down during an outage.
type OutageMode string

const (
	// OutageRefuse closes the listener, so new connections are refused,
	// and closes every open connection, as when the vLLM process dies.
	// Serve listens again on the same address when the outage ends.
	// With Handler alone, which owns no listener, requests are instead
	// answered by closing their connection.
	OutageRefuse OutageMode = "refuse"
	// Outage503 answers every request with 503 (/health and /v1/models
	// too), as a server whose engine died or is restarting; /metrics
	// and /admin/ keep working. Streams in flight stop abruptly.
	Outage503 OutageMode = "503"
)

// valid reports whether m is one of the modes.
func (m OutageMode) valid() bool {
	return m == OutageRefuse || m == Outage503
}

// Outage is one scheduled period of downtime.
type Outage struct {
	// Start is when the outage begins, in simulated time since the
	// engine started (wall time times Speed; the clock runs while the
	// engine is idle too).
	Start time.Duration
	// Duration is how long it lasts, in simulated time; more than 0.
	Duration time.Duration
	// Mode is OutageRefuse or Outage503.
	Mode OutageMode
}

// String gives the outage in the syntax ParseOutages reads, e.g.
// "30s+1m0s:refuse".
func (o Outage) String() string {
	return fmt.Sprintf("%v+%v:%s", o.Start, o.Duration, o.Mode)
}

// outageSyntax is the hint every parse error ends with.
const outageSyntax = "want START+DURATION:MODE with Go durations in simulated time and MODE refuse or 503, e.g. 30s+60s:refuse,300s+10s:503"

// ParseOutages reads a schedule written as comma-separated
// START+DURATION:MODE items, e.g. "30s+60s:refuse,300s+10s:503": an
// outage 30 s after the engine starts that refuses connections for 60 s,
// and one at 300 s that answers 503 for 10 s (all simulated time). An
// empty string is no outages. Outages must not overlap.
func ParseOutages(spec string) ([]Outage, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	items := strings.Split(spec, ",")
	outages := make([]Outage, 0, len(items))
	for i, item := range items {
		o, err := parseOutage(strings.TrimSpace(item))
		if err != nil {
			return nil, fmt.Errorf("outage %d of %q: %w; %s", i+1, spec, err, outageSyntax)
		}
		outages = append(outages, o)
	}
	if err := errors.Join(validateOutages(outages)...); err != nil {
		return nil, err
	}
	return outages, nil
}

// parseOutage reads one START+DURATION:MODE item.
func parseOutage(item string) (Outage, error) {
	if item == "" {
		return Outage{}, errors.New("empty")
	}
	span, mode, ok := strings.Cut(item, ":")
	if !ok {
		return Outage{}, fmt.Errorf("%q has no :MODE", item)
	}
	start, length, ok := strings.Cut(span, "+")
	if !ok {
		return Outage{}, fmt.Errorf("%q has no +DURATION", item)
	}
	var o Outage
	var err error
	if o.Start, err = time.ParseDuration(strings.TrimSpace(start)); err != nil {
		return Outage{}, fmt.Errorf("start: %w", err)
	}
	if o.Duration, err = time.ParseDuration(strings.TrimSpace(length)); err != nil {
		return Outage{}, fmt.Errorf("duration: %w", err)
	}
	o.Mode = OutageMode(strings.TrimSpace(mode))
	if !o.Mode.valid() {
		return Outage{}, fmt.Errorf("mode %q is not refuse or 503", o.Mode)
	}
	if o.Start < 0 {
		return Outage{}, fmt.Errorf("start %v is negative", o.Start)
	}
	if o.Duration <= 0 {
		return Outage{}, fmt.Errorf("duration %v is not positive", o.Duration)
	}
	return o, nil
}

// validateOutages reports outages out of range or overlapping.
func validateOutages(outages []Outage) []error {
	var errs []error
	for i, o := range outages {
		switch {
		case !o.Mode.valid():
			errs = append(errs, fmt.Errorf("simulator: outage %d (%v): mode must be %q or %q", i+1, o, OutageRefuse, Outage503))
		case o.Start < 0:
			errs = append(errs, fmt.Errorf("simulator: outage %d (%v): start must be >= 0", i+1, o))
		case o.Duration <= 0:
			errs = append(errs, fmt.Errorf("simulator: outage %d (%v): duration must be > 0", i+1, o))
		}
	}
	sorted := sortedOutages(outages)
	for i := 1; i < len(sorted); i++ {
		prev, o := sorted[i-1], sorted[i]
		if o.Start < prev.Start+prev.Duration {
			errs = append(errs, fmt.Errorf("simulator: outages %v and %v overlap; start the later one at %v or after",
				prev, o, prev.Start+prev.Duration))
		}
	}
	return errs
}

// sortedOutages returns a copy of outages in order of start.
func sortedOutages(outages []Outage) []Outage {
	sorted := slices.Clone(outages)
	slices.SortStableFunc(sorted, func(a, b Outage) int { return cmp.Compare(a.Start, b.Start) })
	return sorted
}
