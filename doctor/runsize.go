package doctor

import (
	"fmt"
	"os"
)

// tokenIDBytes is what a stored token id adds to an answer: up to six
// digits and a comma in JSON, a few bytes in msgpack.
const tokenIDBytes = 7

// runSize is what the rest of a run generates: units are its output
// lines (a prompt's samples), requests its answers (every turn of a
// conversation with --turns all).
type runSize struct {
	units, requests int
	// from says where the numbers come from.
	from string
}

func (r runSize) String() string {
	if r.requests == r.units {
		return fmt.Sprintf("%d answers (%s)", r.requests, r.from)
	}
	return fmt.Sprintf("%d answers for %d lines (%s)", r.requests, r.units, r.from)
}

// size estimates what the rest of the run generates: from the run's
// consumer (what is not yet done) and manifest, or else the manifest, or
// else the prompts file with the run's flags (--samples, --turns all).
// ok is false when nothing says.
func (s *session) size() (runSize, bool) {
	m := s.manifest
	switch {
	case s.consumer != nil:
		msgs := int(s.consumer.NumPending) + s.consumer.NumAckPending
		if m == nil || m.Total == 0 {
			return runSize{msgs, msgs, "not yet done"}, true
		}
		units := msgs * max(m.SamplesPerMessage, 1)
		return runSize{units, units * m.Requests() / m.Total, "not yet done"}, true
	case m != nil:
		return runSize{m.Total, m.Requests(), "in the manifest"}, true
	case s.prompts > 0:
		k := s.samples()
		requests := s.prompts
		from := "prompts in the prompts file"
		if s.turnsAll() {
			requests, from = s.turns, "every turn of the prompts file"
		}
		if k > 1 {
			from += fmt.Sprintf(", %d samples each", k)
		}
		return runSize{s.prompts * k, requests * k, from}, true
	}
	return runSize{}, false
}

// answerBytes is what one answer may take, and how that was reckoned:
// max_tokens (or assumedTokens when unset) times bytesPerOutputToken, and
// tokenIDBytes more a token when the run stores token ids.
func (s *session) answerBytes() (uint64, string) {
	tokens, from := s.maxTokens(), "max_tokens"
	if tokens == 0 {
		tokens, from = assumedTokens, "tokens (max_tokens unset)"
	}
	per := uint64(bytesPerOutputToken)
	how := fmt.Sprintf("%d %s x %d bytes", tokens, from, per)
	if s.tokenIDs() {
		per += tokenIDBytes
		how = fmt.Sprintf("%d %s x %d bytes with token ids", tokens, from, per)
	}
	return uint64(tokens) * per, how
}

// promptBytes is the prompts file's size per valid prompt: what each
// line and stored message repeats of its prompt; 0 when unknown.
func (s *session) promptBytes() uint64 {
	if s.cfg.PromptsFile == "" || s.prompts == 0 {
		return 0
	}
	st, err := os.Stat(s.cfg.PromptsFile)
	if err != nil {
		return 0
	}
	return uint64(st.Size()) / uint64(s.prompts)
}
