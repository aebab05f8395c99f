package simulator

import (
	"fmt"
	"math"
	"time"
)

// Faults makes the server misbehave the way a long run against vLLM
// does, so that retries, circuit breakers and dead-letter handling can
// be tested. The zero value injects nothing.
//
// Each request draws at most one of the answer faults (the 400, 429,
// 500, 503, hang, disconnect and stream error rates, which must add up
// to at most 1),
// and, independently, whether its first byte is slow. The draw depends
// only on Seed, the prompt's content and how many times this server has
// seen that prompt before, so a rerun with the same seed and the same
// requests injects the same faults, and a retried prompt draws again
// and can succeed. docs/simulator.md describes what a client sees.
type Faults struct {
	// Rate429, Rate500 and Rate503 are the shares of requests answered
	// at once with that status and vLLM's error body; 429 and 503 carry
	// Retry-After: 1. Default 0.
	Rate429, Rate500, Rate503 float64

	// Rate400 is the share of requests refused with the context length
	// error vLLM sends for a prompt that does not fit, worded as for a
	// real overflow (with the request's own figures). Clients treat it
	// as permanent, so such prompts end up dead-lettered. Default 0.
	Rate400 float64

	// HangRate is the share of requests accepted and never answered:
	// no headers, no body, until the client gives up. A hung request
	// takes no engine slot, so it does not slow the others. Default 0.
	HangRate float64

	// DisconnectRate is the share of requests whose connection is cut
	// part way through the answer (after 10 to 90% of its tokens,
	// decided like the fault itself): a stream stops without a finish
	// reason or [DONE], a non-streaming request gets no response at
	// all. Default 0.
	DisconnectRate float64

	// StreamErrorRate is the share of requests whose generation fails
	// part way, after 10 to 90% of the answer's tokens (at least one),
	// as when vLLM's engine dies mid-answer. A stream sends what was
	// generated, then vLLM's in-stream error event (an error body with
	// type BadRequestError and code 400, vLLM's default for any failure
	// after the stream began) and [DONE]: no finish reason, no usage
	// chunk. A non-streaming request waits as long, then gets 500 with
	// type InternalServerError, as vLLM answers a generation that fails
	// before its response began. Default 0.
	StreamErrorRate float64

	// SlowFirstByte delays the first byte of a SlowFirstByteRate share
	// of requests by this much simulated time (wall time is this over
	// Speed), before they reach the engine, so the delay adds to any
	// time spent queued. It applies whatever else is injected. Default
	// 0: no delay, and a rate without a delay is an error.
	SlowFirstByte     time.Duration
	SlowFirstByteRate float64

	// Outages is a schedule of periods during which the whole server is
	// down, in simulated time since the engine started; see Outage.
	// Outages can also be started and ended through /admin/outage.
	// Default none.
	Outages []Outage
}

// faultKind names what was injected, for the counters and
// aerie_sim_faults_injected_total{kind}.
type faultKind int

const (
	faultNone faultKind = iota
	fault400
	fault429
	fault500
	fault503
	faultHang
	faultDisconnect
	faultStreamError
	faultSlowFirstByte
	faultOutageRefuse   // an outage of mode refuse began
	faultOutage503      // an outage of mode 503 began
	faultOutageRejected // a request arrived during an outage
	faultOutageCut      // a request in flight was cut when an outage began
	faultUnauthorized   // a request under /v1 without the API key
	faultModelNotFound  // a request naming a model not served
	numFaultKinds
)

// faultLabels are the kind label values, by faultKind.
var faultLabels = [numFaultKinds]string{
	faultNone:           "none",
	fault400:            "400",
	fault429:            "429",
	fault500:            "500",
	fault503:            "503",
	faultHang:           "hang",
	faultDisconnect:     "disconnect",
	faultStreamError:    "stream_error",
	faultSlowFirstByte:  "slow_first_byte",
	faultOutageRefuse:   "outage_refuse",
	faultOutage503:      "outage_503",
	faultOutageRejected: "outage_rejected",
	faultOutageCut:      "outage_cut",
	faultUnauthorized:   "unauthorized",
	faultModelNotFound:  "model_not_found",
}

// Seeds that make the fault draws independent of the answer length,
// which is drawn from the same prompt hash.
const (
	faultSalt = 0x6661756c74730001
	slowSalt  = 0x736c6f7762797465
	cutSalt   = 0x6375747368617265
)

// Disconnects and stream errors cut an answer after this share of its
// tokens, drawn uniformly between the two: late enough that the client
// has seen the stream start, early enough that it has not seen the end.
const (
	minCutShare = 0.1
	maxCutShare = 0.9
)

// faultPlan is what one request gets.
type faultPlan struct {
	kind faultKind // faultNone, or an answer fault (see answerRates)
	slow bool      // delay the first byte by SlowFirstByte
	// cutShare is, for a disconnect or a stream error, the share of the
	// answer's tokens sent before the answer is cut.
	cutShare float64
}

// faultRate is one answer fault and the share of requests it gets.
type faultRate struct {
	kind faultKind
	rate float64
}

// answerRates lists the mutually exclusive answer faults with their
// rates, in the order their intervals are laid out on [0, 1). A new
// fault goes last, so that a seed keeps drawing the faults it drew
// before for the others.
func (f Faults) answerRates() []faultRate {
	return []faultRate{
		{fault400, f.Rate400}, {fault429, f.Rate429}, {fault500, f.Rate500},
		{fault503, f.Rate503}, {faultHang, f.HangRate}, {faultDisconnect, f.DisconnectRate},
		{faultStreamError, f.StreamErrorRate},
	}
}

// perRequest reports whether any fault is drawn per request; without
// one the server keeps no per-prompt counts.
func (f Faults) perRequest() bool {
	for _, r := range f.answerRates() {
		if r.rate > 0 {
			return true
		}
	}
	return f.SlowFirstByteRate > 0
}

// decide draws the faults for attempt n (counting from 0) of the prompt
// with hash h, which already mixes in the seed. Each answer fault owns
// an interval of [0, 1) as long as its rate, so a fault fires for
// attempt n exactly when a uniform draw from (h, n) falls in its
// interval, and each kind fires at its own rate.
func (f Faults) decide(h, n uint64) faultPlan {
	x := mix64(h ^ mix64(n^faultSalt))
	var p faultPlan
	u, edge := unitFrom(x), 0.0
	for _, r := range f.answerRates() {
		edge += r.rate
		if u < edge {
			p.kind = r.kind
			break
		}
	}
	p.slow = f.SlowFirstByte > 0 && unitFrom(mix64(x^slowSalt)) < f.SlowFirstByteRate
	if p.cutsAnswer() {
		p.cutShare = minCutShare + (maxCutShare-minCutShare)*unitFrom(mix64(x^cutSalt))
	}
	return p
}

// cutsAnswer reports whether the plan cuts the answer part way.
func (p faultPlan) cutsAnswer() bool {
	return p.kind == faultDisconnect || p.kind == faultStreamError
}

// cutAfter is how many of an answer's tokens a disconnect or a stream
// error lets through: at least one, at most all of them (the finish
// reason is never sent).
func (p faultPlan) cutAfter(tokens int) int {
	return min(max(int(p.cutShare*float64(tokens)), 1), tokens)
}

// unitFrom maps a hash to a uniform number in [0, 1) with 53 bits.
func unitFrom(x uint64) float64 {
	return float64(x>>11) / (1 << 53)
}

// validate reports every fault setting out of range.
func (f Faults) validate() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("simulator: "+format, args...))
	}
	sum := 0.0
	for _, r := range f.answerRates() {
		if !(r.rate >= 0 && r.rate <= 1) {
			bad("fault %s rate must be in [0, 1], got %v", faultLabels[r.kind], r.rate)
			continue
		}
		sum += r.rate
	}
	// A little slack so that rates written as decimals that add up to
	// exactly 1 are not refused for rounding.
	if sum > 1+1e-9 {
		bad("fault rates 400, 429, 500, 503, hang, disconnect and stream error add up to %v; each request gets at most one of them, so the sum must be <= 1", sum)
	}
	if !(f.SlowFirstByteRate >= 0 && f.SlowFirstByteRate <= 1) {
		bad("fault slow first byte rate must be in [0, 1], got %v", f.SlowFirstByteRate)
	}
	if f.SlowFirstByte < 0 {
		bad("fault slow first byte must be >= 0, got %v", f.SlowFirstByte)
	}
	if f.SlowFirstByteRate > 0 && f.SlowFirstByte == 0 {
		bad("fault slow first byte rate %v needs a slow first byte duration (e.g. 5s)", f.SlowFirstByteRate)
	}
	errs = append(errs, validateOutages(f.Outages)...)
	return errs
}

// wallTime converts simulated time to wall time at speed, capped far
// beyond any run so that the conversion cannot overflow.
func wallTime(sim time.Duration, speed float64) time.Duration {
	return time.Duration(math.Min(float64(sim)/speed, 1<<62))
}
