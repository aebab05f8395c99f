// Package throughput estimates how fast a run is going and when it will
// end, from the answers the aggregator writes and the heartbeats workers
// publish.
//
// Counting finished answers is misleading for most of the first hour: the
// answers that finish first are the short ones, so both the completion
// rate and the mean length of finished answers start far too low. The
// estimator therefore measures work in tokens. Workers report the tokens
// they have streamed (a rate that is right within seconds of the start)
// and, for each request still being generated, how far it has got. Those
// in-flight requests are right-censored observations of answer length:
// each will be at least as long as what it has streamed. A product-limit
// (Kaplan–Meier) estimate over finished and in-flight requests, with a
// fitted lognormal tail, gives the mean answer length long before the
// long answers finish, and the ETA is the remaining tokens over the token
// rate plus the time the last, partly empty batch takes to drain.
//
// The unit of work is the request: one generated turn. A run regenerating
// every assistant turn (--turns all) writes one line per conversation,
// but a five-turn conversation is five requests, each as long as a
// one-turn answer; counting lines would weigh it as one. So lengths,
// rates and the ETA count requests (Config.Requests), while the counts of
// lines (completed, failed, truncated) and the end of the run stay in
// lines (Config.Total).
package throughput

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// Defaults for Config.
const (
	// DefaultWindow is the span of the recent rates: a minute holds about
	// 30 heartbeats per worker and, at 1.4 requests/s, about 85
	// completions, enough to smooth the noise of single completions while
	// still following a slowdown within a minute.
	DefaultWindow = time.Minute
	// DefaultStaleAfter is how long a worker may stay silent and still
	// count as live: five heartbeat intervals of 2 s, so one or two lost
	// heartbeats do not drop a worker but a dead one is gone within
	// seconds.
	DefaultStaleAfter = 10 * time.Second
)

// recentSpan is the span over which per-request decode speed is measured
// for the ETA during ramp-up, when requests are still starting and the
// speed of the batch changes with its size: five heartbeat intervals.
const recentSpan = 10 * time.Second

// speedSpan is the span over which per-request decode speed is measured
// for the ETA once the first wave has turned over. Prompts arrive at
// random and their prefill slows every step it falls in, so one minute's
// speed wanders by a few percent around the run's; five minutes halve
// that, while a lasting change of speed (a server lost) still shows in
// full within five minutes.
const speedSpan = 5 * time.Minute

// minExact is how many answers must have finished untruncated before the
// length distribution (and so the ETA) is estimated. Fewer than ten short
// answers say almost nothing about the shape of the rest.
const minExact = 10

// Config configures an Estimator.
type Config struct {
	// Run is copied into every snapshot.
	Run string
	// Total is the number of output lines the run expects (prompts times
	// samples). Zero or less means an empty run, which is done from the
	// start.
	Total int
	// Requests is the number of requests (turns) the run makes when every
	// turn succeeds: the unit of work of the ETA. Zero or less means
	// Total: one request per line, as with --turns last.
	Requests int
	// MaxTokens is the most tokens one request of the run may generate
	// (its max_tokens, or the cap of --on-length retry): no answer is
	// longer, so the length distribution stops there from the start. Zero
	// means unknown: the tail stops at the longest truncated answer once
	// there is one. Without it the fitted tail runs past the cap for as
	// long as no capped answer has finished, which on a heavy tail is
	// minutes (a 2,048-token answer at 7 tokens/s), and the ETA came out
	// 60-90% long until then.
	MaxTokens int
	// ReportTurns fills Throughput.TotalTurns and CompletedTurns in
	// snapshots; it is set for runs with --turns all, where turns and
	// lines differ. It changes nothing else.
	ReportTurns bool
	// Window is the span of RequestsPerSec and TokensPerSec. Zero or less
	// means DefaultWindow (one minute).
	Window time.Duration
	// StaleAfter is how long after its last heartbeat a worker stops
	// counting as live: its in-flight requests and its rate drop out.
	// Zero or less means DefaultStaleAfter (10 s).
	StaleAfter time.Duration
	// AckWait is the workers consumer's: the prompts a worker held when it
	// went silent without saying it stops come back to the queue that long
	// after its last progress ack, and the run cannot end before. Zero
	// (unknown) leaves them out of the ETA. SetAckWait sets it later.
	AckWait time.Duration
}

func (c Config) withDefaults() Config {
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	c.Total = max(c.Total, 0)
	if c.Requests <= 0 {
		c.Requests = c.Total
	}
	return c
}

// Request is one generated turn of a written line: one request to the
// backend.
type Request struct {
	// CompletionTokens is the length of the turn's answer, reasoning
	// included.
	CompletionTokens int
	// Truncated is set when the answer stopped at max_tokens
	// (finish_reason "length"): its true length is unknown, at least this.
	Truncated bool
}

// Answer is one line written to completions.jsonl as the estimator counts
// it: the requests it took, and the turns planned for it that will never
// be generated.
type Answer struct {
	// Requests are the line's generated turns in order; the last one is
	// the line's own answer and decides whether the line counts as
	// truncated. Empty counts the line with no request.
	Requests []Request
	// Skipped counts the turns of the conversation after a kept truncated
	// turn, which ended it: they will never run, so for the ETA they are
	// done. Zero with --turns last.
	Skipped int
	// LengthHint is the tokens the input led to expect for the whole
	// line (all its turns); zero for none.
	LengthHint int
}

// Single is the answer of a line that took one request, as every line
// does with --turns last.
func Single(completionTokens int, truncated bool) Answer {
	return Answer{Requests: []Request{{CompletionTokens: completionTokens, Truncated: truncated}}}
}

// Estimator turns completions and heartbeats into throughput snapshots.
// Its methods are safe for concurrent use. Memory stays bounded however
// long the run: lengths go into a log-spaced histogram, rates keep one
// window of history per worker, and workers silent for long are forgotten
// (their tokens still count in the overall rate).
type Estimator struct {
	mu    sync.Mutex
	cfg   Config
	start time.Time

	// Lines of the output files, restored ones included.
	completed, failed, truncated int
	// Requests: written ones (restored included), those of this process,
	// and those accounted for without being written: turns a kept
	// truncated turn left ungenerated (skipped) and the turns of failed
	// lines.
	requests, localRequests int
	// localTokens are the answer tokens of this process's written lines:
	// the overall token rate's floor when the workers' heartbeats are too
	// sparse to have counted them (a run of a few seconds).
	localTokens             int64
	skipped, failedRequests int
	localFailed             int // lines failed in this process
	// longestLine is the most tokens a written line took, all its turns
	// together.
	longestLine int64

	lengths   histogram  // every written request, truncated ones included
	exact     logMoments // written requests that were not truncated
	truncLens histogram  // truncated requests, censored at their length
	limit     int64      // longest truncated request: the max_tokens limit
	hints     HintAccuracy
	longest   int64   // longest written request
	sumTokens float64 // of every written request, for the plain mean

	completions completionCounter
	workers     map[string]*worker
	retired     float64 // tokens of forgotten workers

	fit    lognormal // last tail fit, the next fit's starting point
	fitted bool

	steady      bool      // the first wave has turned over; never reset
	steadySince time.Time // when steady was first seen
	draining    bool      // the last snapshot was draining (see phase)
	// relief is the prefill relief last measured in steady state (see
	// relief.go); 0 until then, which counts as none and is not reported.
	relief float64
}

// New returns an Estimator for a run started (as far as this process is
// concerned) at start; elapsed times and overall rates count from there.
func New(cfg Config, start time.Time) *Estimator {
	cfg = cfg.withDefaults()
	return &Estimator{
		cfg:         cfg,
		start:       start,
		completions: newCompletionCounter(start, cfg.Window),
		workers:     make(map[string]*worker),
	}
}

// Restore counts a line written before this process started. It counts
// in Completed and in the length estimates, not in rates.
func (e *Estimator) Restore(a Answer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addAnswer(a)
}

// RestoreFailed counts a failure recorded before this process started:
// one line, accounting for requests turns of the run (see Failed).
func (e *Estimator) RestoreFailed(requests int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failed++
	e.failedRequests += max(requests, 0)
}

// Completed counts a line written at at: each of its requests counts in
// the rates as finished then.
func (e *Estimator) Completed(at time.Time, a Answer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addAnswer(a)
	e.localRequests += len(a.Requests)
	for _, r := range a.Requests {
		e.completions.add(at)
		e.localTokens += int64(r.CompletionTokens)
	}
}

// Failed counts a line given up on at at. requests is how many of the
// run's requests it accounts for: 1 with --turns last; with --turns all,
// every turn of the conversation, since those stored before the failure
// are finished and the others will not run.
func (e *Estimator) Failed(at time.Time, requests int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failed++
	e.failedRequests += max(requests, 0)
	e.localFailed++
}

// Reopened takes back a failure that accounted for requests: the line
// was queued again (a replay) and is pending, or has completed after all
// (its Completed call counts the answer).
func (e *Estimator) Reopened(requests int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failed = max(e.failed-1, 0)
	e.failedRequests = max(e.failedRequests-max(requests, 0), 0)
}

func (e *Estimator) addAnswer(a Answer) {
	if a.LengthHint > 0 {
		total := 0
		for _, r := range a.Requests {
			total += max(r.CompletionTokens, 0)
		}
		e.hints.Add(a.LengthHint, total)
	}
	e.completed++
	if n := len(a.Requests); n > 0 && a.Requests[n-1].Truncated {
		e.truncated++
	}
	e.skipped += max(a.Skipped, 0)
	var lineTokens int64
	for _, r := range a.Requests {
		n := clampLength(int64(r.CompletionTokens))
		e.requests++
		e.lengths.add(n)
		e.sumTokens += float64(n)
		e.longest = max(e.longest, n)
		lineTokens += n
		if r.Truncated {
			e.truncLens.add(n)
			e.limit = max(e.limit, n)
		} else {
			e.exact.add(n)
		}
	}
	e.longestLine = max(e.longestLine, lineTokens)
}

// Heartbeat records a worker's heartbeat, dated by hb.Time.
func (e *Estimator) Heartbeat(hb schema.Heartbeat) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.workers[hb.Worker]
	if w == nil {
		w = &worker{}
		e.workers[hb.Worker] = w
	}
	w.observe(hb, max(e.cfg.Window, speedSpan))
}

// live returns the workers heard from within StaleAfter of now, and
// forgets workers silent for much longer than any rate looks back.
func (e *Estimator) live(now time.Time) []*worker {
	forget := 2*max(e.cfg.Window, e.cfg.StaleAfter) + speedSpan
	var out []*worker
	for name, w := range e.workers {
		silent := now.Sub(w.lastHeard)
		if silent > forget {
			e.retired += w.streamed()
			delete(e.workers, name)
			continue
		}
		if silent <= e.cfg.StaleAfter {
			out = append(out, w)
		}
	}
	return out
}

// Snapshot returns the state of the run at now.
//
// Completed, Failed and Truncated count lines and include restored ones.
// InFlight and Workers come from the latest heartbeats of live workers
// (heard from within StaleAfter); InFlight is at most the lines not yet
// completed or failed. RequestsPerSec counts the requests
// (turns) of the lines this process wrote over the last Window, or since
// start when that is shorter; RequestsPerSecOverall since start. With
// ReportTurns, TotalTurns is Config.Requests and CompletedTurns the
// requests written, skipped or accounted for by failed lines, plus the
// turns live workers report finished and stored for conversations they
// have not finished (Heartbeat.InterimTurns). TokensPerSec sums, over live workers,
// the increase of each one's streamed-token counter over the last Window
// of its own heartbeats (a worker gone stale is not streaming any more, so
// it drops out); TokensPerSecOverall counts every worker's tokens since
// start. MeanCompletionTokens is the plain mean of written requests;
// EstimatedCompletionTokens the censoring-aware mean (see survival), zero
// until minExact answers have finished. ETASec is described at eta.
func (e *Estimator) Snapshot(now time.Time) schema.Throughput {
	e.mu.Lock()
	defer e.mu.Unlock()

	elapsed := now.Sub(e.start).Seconds()
	if !(elapsed > 0) {
		elapsed = 0
	}
	live := e.live(now)
	var (
		inFlight, windows int
		// shares is the part of the windows not held by other runs,
		// others what they hold (see Heartbeat.OtherRuns).
		shares, others    int
		requests          int // requests being generated: inFlight less the conversations between turns
		decoding, interim int
		censored          []float64
		flights           []flight
		window, recent    spanStats
		rateWindow        float64 // tokens/s, sum of per-worker rates
		streamed          = e.retired
	)
	for _, w := range e.workers {
		streamed += w.streamed()
	}
	for _, w := range live {
		inFlight += w.inFlight
		requests += w.requests
		windows += w.window
		shares += w.window - w.others
		others += w.others
		interim += w.interim
		if n := len(w.samples); n > 0 {
			decoding += w.samples[n-1].decoding
		}
		censored = append(censored, w.inFlightTokens...)
		flights = append(flights, w.flights...)
		ws := w.over(e.cfg.Window)
		window.add(ws)
		recent.add(w.over(recentSpan))
		rateWindow += ws.perSecond()
	}
	slices.Sort(censored)
	// A heartbeat sent before the last settlements still counts prompts
	// whose lines are written since; no more can be in flight than lines
	// are left, so a finished run reads zero.
	inFlight = min(inFlight, max(e.cfg.Total-e.completed-e.failed, 0))

	out := schema.Throughput{
		Run:        e.cfg.Run,
		Time:       now,
		Total:      e.cfg.Total,
		Completed:  e.completed,
		Failed:     e.failed,
		Truncated:  e.truncated,
		InFlight:   inFlight,
		Workers:    len(live),
		ElapsedSec: elapsed,
	}
	out.RequestsPerSec = e.completions.rate(now)
	if elapsed > 0 {
		out.RequestsPerSecOverall = float64(e.localRequests) / elapsed
		out.TokensPerSecOverall = max(streamed, float64(e.localTokens)) / elapsed
	}
	out.TokensPerSec = rateWindow
	if c, n := e.hints.Correlation(); n > 0 {
		out.HintedAnswers = n
		if !math.IsNaN(c) {
			out.HintRankCorrelation = c
		}
	}
	if e.requests > 0 {
		out.MeanCompletionTokens = e.sumTokens / float64(e.requests)
	}
	doneRequests := min(e.requests+e.skipped+e.failedRequests+interim, e.cfg.Requests)
	if e.cfg.ReportTurns {
		out.TotalTurns, out.CompletedTurns = e.cfg.Requests, doneRequests
	}

	out.Phase = e.phase(now, inFlight, shares, interim)

	sv := e.survival(censored)
	if sv != nil {
		out.EstimatedCompletionTokens = sv.mean()
	}

	// Per-request decode speed: during ramp-up the batch is still filling
	// and the last few heartbeats show its speed best; while draining the
	// batch empties and speeds up, and the same holds. In steady state the
	// speed is measured over speedSpan, but not over the ramp-up before
	// it, whose prefill-bound steps are slower: just after the first wave
	// has turned over, over the time since (at least recentSpan). Taking
	// at least the rates' window instead reached back into the ramp-up
	// in a run of a few minutes (a simulator run six times faster than
	// real time), and the ETA came out a fifth long at a tenth of it.
	//
	// The drain gains the prefill relief (see relief.go): measured over
	// the same span in steady state. While draining, the speed is that of
	// the recent intervals in which no prompt was sent, which has the
	// relief in it already; until there is one, the relief last measured.
	var speed float64
	relief := 1.0
	switch out.Phase {
	case schema.PhaseRampUp:
		speed = recent.speed()
	case schema.PhaseDraining:
		var idle spanStats
		for _, w := range live {
			idle.add(w.overIdle(recentSpan))
		}
		if speed = idle.speed(); !(speed > 0) {
			speed, relief = recent.speed(), e.relief
		}
	default:
		span := min(speedSpan, max(now.Sub(e.steadySince), recentSpan))
		var long spanStats
		for _, w := range live {
			long.add(w.over(span))
		}
		speed = long.speed()
		if out.Phase == schema.PhaseSteady {
			// A fit that fails (a window not full for a while) keeps
			// the last one: the relief is the backend's and the run's.
			if r, ok := fleetRelief(live, now.Add(-span)); ok {
				e.relief = r
			}
			relief = max(e.relief, 1)
		}
	}
	longest := float64(e.longest)
	if len(censored) > 0 {
		longest = max(longest, censored[len(censored)-1])
	}
	band := eta(etaInput{
		full:        windows,
		background:  others,
		finished:    e.requests,
		requests:    e.cfg.Requests,
		phase:       out.Phase,
		remaining:   e.cfg.Requests - doneRequests,
		turns:       e.turnsPerLine(doneRequests, interim),
		queuedLines: e.cfg.Total - e.completed - e.failed - inFlight,
		longestLine: max(float64(e.longestLine), longest),
		inFlight:    requests,
		censored:    censored,
		lengths:     sv,
		speed:       speed,
		decoding:    decoding,
		longest:     longest,
		flights:     flights,
		relief:      relief,
	})
	out.ETASec, out.ETALowSec, out.ETAHighSec = band.eta, band.low, band.high
	out.PrefillRelief = math.Round(e.relief*100) / 100
	if out.Phase == schema.PhaseDraining || (band.stragglers && out.Phase != schema.PhaseDone) {
		out.Stragglers = waitingOn(out.Phase, requests, e.cfg.Requests-doneRequests, flights, censored)
	}
	if back, held := e.strandedBack(now); back > 0 && out.Phase != schema.PhaseDone {
		holdETA(&out, back.Seconds())
		out.Stranded, out.StrandedBackSec = held, math.Ceil(back.Seconds())
	}
	return sanitize(out)
}

// turnsPerLine is the mean number of turns of the lines not yet
// finished, counting the turns already done of conversations in flight
// (interim); 1 when every line is one request.
func (e *Estimator) turnsPerLine(doneRequests, interim int) float64 {
	lines := e.cfg.Total - e.completed - e.failed
	if e.cfg.Requests == e.cfg.Total || lines <= 0 {
		return 1
	}
	return float64(e.cfg.Requests-doneRequests+interim) / float64(lines)
}

// survival fits the tail and builds the length distribution from the
// written answers and the in-flight requests (sorted). It returns nil
// until minExact answers have finished untruncated.
func (e *Estimator) survival(censored []float64) *survival {
	if e.exact.n < minExact {
		return nil
	}
	cens := make([]weightedLog, 0, len(censored)+8)
	for _, c := range censored {
		if c > 0 { // a request at zero tokens says nothing about its length
			cens = append(cens, weightedLog{y: math.Log1p(c), w: 1})
		}
	}
	e.truncLens.each(func(mean float64, count int64) {
		cens = append(cens, weightedLog{y: math.Log1p(mean), w: float64(count)})
	})
	fit, ok := fitLognormal(e.exact, cens, e.fit, e.fitted, defaultPrior)
	if ok {
		e.fit, e.fitted = fit, true
	}
	limit := e.limit
	if e.cfg.MaxTokens > 0 {
		limit = max(limit, int64(e.cfg.MaxTokens))
	}
	return buildSurvival(&e.lengths, censored, fit, ok, float64(limit), defaultMinRisk)
}

func (s *spanStats) add(o spanStats) {
	s.tokens += o.tokens
	s.seconds += o.seconds
	s.seqSecs += o.seqSecs
}

func (s spanStats) perSecond() float64 {
	if s.seconds <= 0 {
		return 0
	}
	return s.tokens / s.seconds
}

// speed is tokens per second per decoding request.
func (s spanStats) speed() float64 {
	if s.seqSecs <= 0 {
		return 0
	}
	return s.tokens / s.seqSecs
}

// sanitize replaces values JSON cannot carry (NaN, ±Inf) and negative
// rates, which no input should produce but which must never be published.
func sanitize(t schema.Throughput) schema.Throughput {
	fix := func(v *float64) {
		if math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0 {
			*v = 0
		}
	}
	fix(&t.RequestsPerSec)
	fix(&t.RequestsPerSecOverall)
	fix(&t.TokensPerSec)
	fix(&t.TokensPerSecOverall)
	fix(&t.MeanCompletionTokens)
	fix(&t.EstimatedCompletionTokens)
	fix(&t.ElapsedSec)
	fix(&t.PrefillRelief)
	if math.IsNaN(t.ETASec) || math.IsInf(t.ETASec, 0) || t.ETASec < 0 {
		t.ETASec, t.ETALowSec, t.ETAHighSec = -1, -1, -1
	}
	// The band holds the ETA, whatever rounding did.
	if math.IsNaN(t.ETALowSec) || math.IsInf(t.ETALowSec, 0) || t.ETALowSec > t.ETASec {
		t.ETALowSec = t.ETASec
	}
	if math.IsNaN(t.ETAHighSec) || math.IsInf(t.ETAHighSec, 0) || t.ETAHighSec < t.ETASec {
		t.ETAHighSec = t.ETASec
	}
	if t.ETASec < 0 {
		t.Stragglers = nil
	}
	if t.ETALowSec < 0 && t.ETASec >= 0 {
		t.ETALowSec = 0
	}
	return t
}
