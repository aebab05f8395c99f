package report

import (
	"fmt"
	"strings"
	"time"
)

// span is a stretch of a run between two events.
type span struct{ from, to time.Time }

// waitingSpans are the stretches of the run whose events said it was
// waiting for slots (its workers serving other runs): from the first
// event that said so to the first that did not, or the last event.
func waitingSpans(evs []event) []span {
	var out []span
	var open *span
	for _, e := range evs {
		switch {
		case e.waitingForSlots && open == nil:
			out = append(out, span{from: e.at, to: e.at})
			open = &out[len(out)-1]
		case e.waitingForSlots:
			open.to = e.at
		case open != nil:
			open.to = e.at
			open = nil
		}
	}
	return out
}

// maxSpansShown bounds the stretches a report lists.
const maxSpansShown = 5

// describeSpans says how long the run waited for slots and when, as
// offsets from start: "4m10s in 2 stretches: 0s–3m00s, 12m05s–13m15s;
// it ran the rest of the time".
func describeSpans(spans []span, start time.Time) string {
	var total time.Duration
	parts := make([]string, 0, min(len(spans), maxSpansShown))
	for i, s := range spans {
		total += s.to.Sub(s.from)
		if i < maxSpansShown {
			parts = append(parts, roundDuration(s.from.Sub(start)).String()+"–"+roundDuration(s.to.Sub(start)).String())
		}
	}
	more := ""
	if len(spans) > maxSpansShown {
		more = fmt.Sprintf(" and %d more", len(spans)-maxSpansShown)
	}
	return fmt.Sprintf("%s in %d stretch%s from the first event: %s%s (its workers served other runs); it ran the rest of the time",
		roundDuration(total).String(), len(spans), map[bool]string{true: "", false: "es"}[len(spans) == 1], strings.Join(parts, ", "), more)
}
