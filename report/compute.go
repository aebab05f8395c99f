package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/bytesize"
	"github.com/aerie-dev/aerie/schema"
)

// Chart ids, one per chart; tests and readers find a chart by them.
const (
	ChartRequests = "throughput-requests"
	ChartTokens   = "throughput-tokens"
	ChartLengths  = "completion-lengths"
	ChartTTFT     = "ttft-cdf"
	ChartLatency  = "latency-cdf"
	ChartWorkers  = "worker-share"
	ChartETA      = "eta"
)

// Limits of what the charts draw.
const (
	cdfPoints   = 400 // points of a CDF line
	lengthBins  = 60  // at most about this many bins of completion length (from 24)
	workerBars  = 16  // workers named one by one; the rest are summed
	msToSeconds = 10000
)

// timeline is the span of the run the report covers: from its first
// throughput event (about the aggregator's start) or its first answer,
// whichever came first, to the last answer or failure written.
type timeline struct {
	start, end time.Time
	// div and unit scale seconds for the time axes.
	div  float64
	unit string
}

func newTimeline(c *completions, f *failures, evs []event) timeline {
	var t timeline
	if len(evs) > 0 {
		t.start = evs[0].at
	}
	t.start = earliest(t.start, c.first)
	t.end = latest(c.last, f.last)
	if t.end.IsZero() && len(evs) > 0 {
		t.end = evs[len(evs)-1].at
	}
	span := t.end.Sub(t.start).Seconds()
	if len(evs) > 0 {
		span = max(span, evs[len(evs)-1].at.Sub(t.start).Seconds())
	}
	switch {
	case span > 3*3600:
		t.div, t.unit = 3600, "hours"
	case span > 600:
		t.div, t.unit = 60, "minutes"
	default:
		t.div, t.unit = 1, "seconds"
	}
	return t
}

func (t timeline) wall() time.Duration {
	if t.start.IsZero() || t.end.Before(t.start) {
		return 0
	}
	return t.end.Sub(t.start)
}

// at is where a moment falls on the time axis.
func (t timeline) at(x time.Time) float64 { return x.Sub(t.start).Seconds() / t.div }

func (r *Report) compute(c *completions, f *failures, evs []event, extra []Setting) {
	tl := newTimeline(c, f, evs)
	total := 0
	if r.Manifest != nil {
		total = r.Manifest.Total
	} else if len(evs) > 0 {
		total = evs[len(evs)-1].total
	}
	r.Done = (len(evs) > 0 && evs[len(evs)-1].phase == schema.PhaseDone) || (total > 0 && c.count+f.count >= total)
	r.Unknown = !r.Done && total == 0
	switch {
	case r.Unknown:
		r.Notes = append(r.Notes, "whether the run is finished is unknown: with neither manifest.json nor a throughput event, its size is not known")
	case !r.Done:
		r.Notes = append(r.Notes, "the run is not finished: counts and charts cover what is written so far, and the ETA cannot be compared with the truth yet")
	}
	reasonOrder(c)
	extraction := r.Manifest != nil && r.Manifest.Extraction != nil
	// A hidden-states sample's work is its input tokens: the events
	// count those, and so do the rates here.
	work := rateTokens{"output tokens", c.completionTokens}
	tokensTitle := "Output tokens per second"
	if extraction {
		work, tokensTitle = rateTokens{"input tokens", c.promptTokens}, "Input tokens extracted per second"
	}
	r.Summary = summary(c, f, evs, tl, total, work)
	if extraction {
		r.Summary = append(r.Summary, extractionSummary(r.Manifest.Extraction, c, tl)...)
	}
	r.Params = params(r.Manifest, extra)
	r.Charts = []Chart{
		throughputChart(ChartRequests, "Completions per second", "requests/s", evs, tl, func(e event) float64 { return e.requestsPerSec }),
		throughputChart(ChartTokens, tokensTitle, "tokens/s", evs, tl, func(e event) float64 { return e.tokensPerSec }),
		lengthChart(c),
		cdfChart(ChartTTFT, "Time to first token", c.ttft),
		cdfChart(ChartLatency, "Latency (request to last token)", c.latency),
		workerChart(c),
		etaChart(evs, tl, r.Done),
	}
	if extraction {
		// Samples generate no answer: their lengths by finish reason
		// say nothing.
		r.Charts = slices.DeleteFunc(r.Charts, func(c Chart) bool { return c.ID == ChartLengths })
	}
}

// reasonOrder puts "stop" first and "length" second among the finish
// reasons, the rest by name, so that colors mean the same in every
// report.
func reasonOrder(c *completions) {
	rank := func(s string) int {
		switch s {
		case "stop":
			return 0
		case "length":
			return 1
		}
		return 2
	}
	sorted := slices.Clone(c.reasons)
	slices.SortFunc(sorted, func(a, b string) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a, b))
	})
	perm := make([]uint8, len(c.reasons))
	for old, name := range c.reasons {
		perm[old] = uint8(slices.Index(sorted, name))
	}
	for i, v := range c.reason {
		c.reason[i] = perm[v]
	}
	c.reasons = sorted
}

// rateTokens are the tokens a run's rates count, and their name: output
// tokens, or a hidden-states run's input tokens, which the events count
// too.
type rateTokens struct {
	name string
	n    int64
}

// summary is the report's summary table, its rates in work's tokens.
func summary(c *completions, f *failures, evs []event, tl timeline, total int, work rateTokens) []Setting {
	var s []Setting
	add := func(name, format string, args ...any) { s = append(s, Setting{name, fmt.Sprintf(format, args...)}) }
	if total > 0 {
		add("expected", "%s answers (prompts × samples)", thousands(total))
	}
	done := fmt.Sprintf("%s (%s truncated at max_tokens)", thousands(c.count), thousands(c.truncated))
	switch {
	case c.simulated > 0 && c.simulated == c.count:
		done += "; all from aerie's simulator, not a model"
	case c.simulated > 0:
		done += fmt.Sprintf("; %s from aerie's simulator, not a model", thousands(c.simulated))
	}
	add("completed", "%s", done)
	if corr, n := c.hints.Correlation(); n >= 3 && !math.IsNaN(corr) {
		note := fmt.Sprintf("rank correlation %.2f with the tokens taken, over %s answers with a hint", corr, thousands(n))
		if c.simulated == c.count {
			note += " (the simulator draws answer lengths without reading the hints)"
		}
		add("length hints", "%s", note)
	}
	failed := thousands(f.count)
	if f.count > 0 {
		var parts []string
		for _, k := range sortedByCount(f.byReason) {
			parts = append(parts, k+" "+thousands(f.byReason[k]))
		}
		failed += ": " + strings.Join(parts, ", ")
	}
	add("failed", "%s", failed)
	if rest := total - c.count - f.count; total > 0 && rest > 0 {
		add("not accounted for", "%s (still queued, in flight or lost)", thousands(rest))
	}
	mean := 0.0
	if c.count > 0 {
		mean = float64(c.completionTokens) / float64(c.count)
	}
	add("tokens", "%s prompt, %s completion (%.0f per answer)", thousands(c.promptTokens), thousands(c.completionTokens), mean)
	wall := tl.wall()
	add("wall time", "%s (first event or answer to last answer or failure)", roundDuration(wall))
	if spans := waitingSpans(evs); len(spans) > 0 {
		add("waiting for slots", "%s", describeSpans(spans, evs[0].at))
	}
	if wall > 0 {
		add("throughput, mean", "%.2f requests/s, %s %s/s (over the wall time)",
			float64(c.count)/wall.Seconds(), rounded(float64(work.n)/wall.Seconds()), work.name)
	}
	var reqs, toks []float64
	for _, e := range evs {
		if e.phase == schema.PhaseRampUp || e.phase == schema.PhaseSteady || e.phase == schema.PhaseDraining {
			reqs, toks = append(reqs, e.requestsPerSec), append(toks, e.tokensPerSec)
		}
	}
	if len(reqs) > 0 {
		add("throughput, median", "%.2f requests/s, %s %s/s (median of the one-minute rates of %d events)",
			median(reqs), rounded(median(toks)), work.name, len(reqs))
	}
	add("TTFT", "%s", percentiles(sortFloats(c.ttft)))
	add("latency", "%s", percentiles(sortFloats(c.latency)))
	add("workers", "%d", len(c.byWorker))
	return s
}

// percentiles writes p50, p90 and p99 of sorted milliseconds.
func percentiles(ms []float32) string {
	if len(ms) == 0 {
		return "no answers"
	}
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s", fmtMillis(Percentile(ms, 50)), fmtMillis(Percentile(ms, 90)),
		fmtMillis(Percentile(ms, 99)))
}

func fmtMillis(ms float64) string {
	if ms >= msToSeconds {
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// thousands writes n with a comma between groups of three digits.
func thousands[T int | int64](n T) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return pick(neg, "-", "") + b.String()
}

// rounded is x to the unit, in thousands.
func rounded(x float64) string { return thousands(int64(math.Round(x))) }

func roundDuration(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

func sortedByCount(m map[string]int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b)) })
	return keys
}

// params lists the run's manifest, then extra.
func params(m *schema.Manifest, extra []Setting) []Setting {
	if m == nil {
		return extra
	}
	s := []Setting{
		{"model", m.Model},
		{"created", m.CreatedAt.UTC().Format(time.RFC3339)},
		{"producer", m.Producer},
		{"prompts file", m.Source},
		{"prompts", thousands(max(m.Prompts, m.Total/m.SampleCount()))},
		{"samples per prompt", strconv.Itoa(m.SampleCount())},
		{"turns", m.TurnsMode()},
	}
	if m.TurnsMode() == schema.TurnsAll {
		s = append(s, Setting{"context reasoning", cmp.Or(m.ContextReasoning, "drop")}, Setting{"requests planned", strconv.Itoa(m.Requests())})
	}
	s = append(s, Setting{"sampling", samplingText(m.Params)},
		Setting{"max attempts", strconv.Itoa(m.Policy.Attempts())},
		Setting{"on length", m.Policy.Length()})
	if m.ReturnTokenIDs {
		s = append(s, Setting{"token ids", "returned"})
	}
	if m.PromptsDigest != "" {
		s = append(s, Setting{"prompts digest", m.PromptsDigest})
	}
	return append(s, extra...)
}

// samplingText writes the parameters the run sets, as in the request.
func samplingText(p schema.Params) string {
	b, err := json.Marshal(p)
	if err != nil || p.IsZero() {
		return "none set: the backend's defaults"
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil {
		return string(b)
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		parts = append(parts, k+"="+string(fields[k]))
	}
	return strings.Join(parts, ", ")
}

func throughputChart(id, title, unit string, evs []event, tl timeline, value func(event) float64) Chart {
	ch := lineChart{id: id, title: title, x: axis{0, 1, "time since the start (" + tl.unit + ")"}, y: axis{0, 1, unit + ", last minute"}}
	var pts []Point
	for _, e := range evs {
		pts = append(pts, Point{tl.at(e.at), value(e)})
		ch.x.hi, ch.y.hi = max(ch.x.hi, tl.at(e.at)), max(ch.y.hi, value(e))
	}
	ch.series = []series{{name: unit, pts: pts}}
	if len(pts) == 0 {
		ch.empty = "no throughput events (events.jsonl is absent or empty)"
	}
	return Chart{ID: id, Title: title, SVG: ch.render(),
		Caption: "Rate over the minute before each throughput event, as the aggregator published it."}
}

func lengthChart(c *completions) Chart {
	const title = "Completion length by finish reason"
	sb := stackedBars{id: ChartLengths, title: title, xLabel: "completion tokens (reasoning included)"}
	if c.count == 0 {
		sb.empty = "no answers"
	} else {
		sb.hist = NewHistogram(c.tokens, c.reason, c.reasons, lengthBins)
		for i, name := range c.reasons {
			switch {
			case name == "stop":
				sb.colors = append(sb.colors, palette[0])
			case name == "length":
				sb.colors = append(sb.colors, palette[3])
			default:
				sb.colors = append(sb.colors, palette[(i+4)%len(palette)])
			}
		}
	}
	return Chart{ID: ChartLengths, Title: title, SVG: sb.render(),
		Caption: "Answers by completion length; \"length\" answers stopped at max_tokens and are not clean training examples."}
}

func cdfChart(id, title string, ms []float32) Chart {
	sorted := sortFloats(ms)
	div, unit := 1.0, "ms"
	if len(sorted) > 0 && sorted[len(sorted)-1] >= msToSeconds {
		div, unit = 1000, "s"
	}
	ch := lineChart{id: id, title: title, x: axis{0, 1, unit}, y: axis{0, 1, "fraction of answers at or below"}}
	pts := CDF(sorted, cdfPoints)
	for i := range pts {
		pts[i].X /= div
		ch.x.hi = max(ch.x.hi, pts[i].X)
	}
	ch.series = []series{{name: title, pts: pts, step: true}}
	caption := "Cumulative distribution over the answers."
	if len(sorted) == 0 {
		ch.empty = "no answers"
	} else {
		caption = fmt.Sprintf("Cumulative distribution over %s answers; p50 %s, p99 %s.", thousands(len(sorted)),
			fmtMillis(Percentile(sorted, 50)), fmtMillis(Percentile(sorted, 99)))
	}
	return Chart{ID: id, Title: title, SVG: ch.render(), Caption: caption}
}

func workerChart(c *completions) Chart {
	const title = "Answers by worker"
	var bars []hbar
	names := sortedByCount(c.byWorker)
	for i, w := range names {
		if i == workerBars-1 && len(names) > workerBars {
			rest := 0
			for _, o := range names[i:] {
				rest += c.byWorker[o]
			}
			bars = append(bars, hbar{fmt.Sprintf("%d other workers", len(names)-i), rest})
			break
		}
		bars = append(bars, hbar{cmp.Or(w, "(unnamed)"), c.byWorker[w]})
	}
	return Chart{ID: ChartWorkers, Title: title, SVG: hbars(ChartWorkers, title, bars, c.count),
		Caption: "Completed answers written by each worker, and its share of them."}
}

// hasBand reports whether an event carries an ETA band: an event from
// before the band existed has zeros there, beside any ETA; a band of
// zeros is real only once the run is done.
func hasBand(e event) bool {
	return e.eta >= 0 && e.etaLow >= 0 && e.etaHigh >= e.etaLow && (e.etaHigh > 0 || e.phase == schema.PhaseDone)
}

func etaChart(evs []event, tl timeline, done bool) Chart {
	const title = "ETA: predicted against actual remaining time"
	ch := lineChart{id: ChartETA, title: title, x: axis{0, 1, "time since the start (" + tl.unit + ")"}, y: axis{0, 1, "time remaining (" + tl.unit + ")"}}
	var eta, actual, lo, hi []Point
	banded, held := 0, 0 // events before the end with a band, and those whose band held the truth
	for _, e := range evs {
		x := tl.at(e.at)
		ch.x.hi = max(ch.x.hi, x)
		if e.eta >= 0 && !math.IsInf(e.eta, 0) && !math.IsNaN(e.eta) {
			eta = append(eta, Point{x, e.eta / tl.div})
		}
		if hasBand(e) {
			lo, hi = append(lo, Point{x, e.etaLow / tl.div}), append(hi, Point{x, e.etaHigh / tl.div})
			if truth := tl.end.Sub(e.at).Seconds(); done && e.phase != schema.PhaseDone {
				banded++
				if truth >= e.etaLow && truth <= e.etaHigh {
					held++
				}
			}
		}
		if done {
			actual = append(actual, Point{x, max(tl.end.Sub(e.at).Seconds(), 0) / tl.div})
		}
	}
	for _, ps := range [][]Point{eta, actual, hi} {
		for _, p := range ps {
			ch.y.hi = max(ch.y.hi, p.Y)
		}
	}
	// A wild early estimate would flatten the rest: the axis stops at
	// twice the longest true remaining time, and lines are clipped.
	clipped := false
	if len(actual) > 0 && ch.y.hi > 2*actual[0].Y && actual[0].Y > 0 {
		ch.y.hi, clipped = 2*actual[0].Y, true
		for _, ps := range [][]Point{eta, lo, hi} {
			for i := range ps {
				ps[i].Y = min(ps[i].Y, ch.y.hi)
			}
		}
	}
	ch.series = []series{{name: "predicted ETA", pts: eta}}
	if done {
		ch.series = append(ch.series, series{name: "actual remaining", pts: actual, dash: true, color: palette[3]})
	}
	if len(lo) > 0 && slices.ContainsFunc(hi, func(p Point) bool { return p.Y > 0 }) {
		ch.bands = []band{{name: "uncertainty band", lo: lo, hi: hi, color: palette[0]}}
	}
	caption := "Each throughput event's ETA, with its band where it had one, against the time the run really took from that event to its last answer."
	if banded > 0 {
		caption += fmt.Sprintf(" The band held the truth at %d of %d events (%.0f%%).", held, banded, 100*float64(held)/float64(banded))
	}
	if clipped {
		caption += " Values above twice the first true remaining time are drawn at that height."
	}
	switch {
	case len(evs) == 0:
		ch.empty = "no throughput events (events.jsonl is absent or empty)"
	case !done:
		caption = "Each throughput event's ETA; the run is not finished, so the actual remaining time is not known yet."
	}
	return Chart{ID: ChartETA, Title: title, SVG: ch.render(), Caption: caption}
}

// extractionSummary is what the report adds for a hidden-states run x:
// its samples' tokens are input tokens read (the "prompt" tokens above),
// and its files' size is those tokens at x's bytes a token.
func extractionSummary(x *schema.Extraction, c *completions, tl timeline) []Setting {
	written := c.promptTokens * x.BytesPerToken()
	s := []Setting{{"hidden states", fmt.Sprintf("%s input tokens read, %s of %s written (%d layers %v x hidden %d, %s: %s a token); the files are hidden_states/hs_<idx>.safetensors beside the run's dataset",
		thousands(c.promptTokens), bytesize.Format(written), bytesize.Format(x.Bytes()), len(x.LayerIDs), x.LayerIDs, x.HiddenSize, x.DType, bytesize.Format(x.BytesPerToken()))}}
	if wall := tl.wall(); wall > 0 {
		s = append(s, Setting{"extraction rate", fmt.Sprintf("%s input tokens/s, %s/s of hidden states (over the wall time)",
			rounded(float64(c.promptTokens)/wall.Seconds()), bytesize.Format(int64(float64(written)/wall.Seconds())))})
	}
	return s
}
