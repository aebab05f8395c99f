package schema

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// A feature names something a reader must understand to handle a run, or
// one of its messages, correctly: a worker that answered only sample 0 of
// a message asking for three, or wrote a conversation's last turn
// without the others, would lose work without a word. A run's manifest
// lists the features it needs beyond those of the first manifest version
// (Manifest.Needs), each message repeats its own in HeaderNeeds, and a
// reader that lacks one leaves the run alone and says which (Lacking).
//
// A name, once given, keeps its meaning for ever; a change that old
// readers cannot ignore gets a new name. Every field of the wire types is
// either part of version 1, tied to a feature, or noted as one that old
// readers may ignore (wireFields; a test keeps that list whole).
const (
	// FeatureSamples: Sample, several answers to one prompt, each an
	// output line of its own (--samples).
	FeatureSamples = "samples"
	// FeatureSamplesInMessage: Prompt.Samples, several samples asked in
	// one request (vLLM's n) and settled one by one.
	FeatureSamplesInMessage = "samples-in-message"
	// FeatureTurnsAll: every assistant turn of a conversation generated in
	// order, each stored before the next (--turns all).
	FeatureTurnsAll = "turns-all"
	// FeatureContextReasoning: earlier answers' reasoning sent back in a
	// later turn's context (--context-reasoning keep).
	FeatureContextReasoning = "context-reasoning"
	// FeatureTokenIDs: the backend's token ids of every prompt and answer
	// (--return-token-ids).
	FeatureTokenIDs = "token-ids"
	// FeatureSamplingControls: sampling parameters beyond max_tokens,
	// temperature and top_p (top_k, min_p, penalties, seed, stop,
	// reasoning effort, chat template kwargs, extra body).
	FeatureSamplingControls = "sampling-controls"
	// FeaturePromptParams: an input line's own parameters, overriding the
	// run's (Prompt.Params).
	FeaturePromptParams = "prompt-params"
	// FeaturePromptMaxTokens: a replay's own max_tokens (Prompt.MaxTokens).
	FeaturePromptMaxTokens = "prompt-max-tokens"
	// FeatureOnLength: a run's failure policy other than the defaults
	// (Policy: attempts other than DefaultMaxAttempts, on-length
	// dead-letter or retry).
	FeatureOnLength = "failure-policy"
	// FeatureSimulatedMark: an answer marked as the simulator's
	// (Result.Simulated), which export refuses as a real model's.
	FeatureSimulatedMark = "simulated-mark"
)

// TaskChat is the task kind of every run without a Manifest.Task: answer
// a conversation. It is part of version 1 and needs no feature.
const TaskChat = "chat"

// TaskFeature is the feature a run of task kind task needs; "" for chat.
func TaskFeature(task string) string {
	if task == "" || task == TaskChat {
		return ""
	}
	return "task-" + task
}

// implemented is every feature this build implements, as its readers
// (worker, aggregator, export) handle them; test builds may add to it
// (see features_testonly.go).
var implemented = []string{
	FeatureSamples, FeatureSamplesInMessage, FeatureTurnsAll, FeatureContextReasoning,
	FeatureTokenIDs, FeatureSamplingControls, FeaturePromptParams, FeaturePromptMaxTokens,
	FeatureOnLength, FeatureSimulatedMark, FeatureTaskHiddenStates,
}

// Implemented returns the features this build implements, sorted.
func Implemented() []string {
	f := slices.Clone(implemented)
	slices.Sort(f)
	return f
}

// Implements reports whether this build implements feature f.
func Implements(f string) bool { return slices.Contains(implemented, f) }

// Lacking returns the features of needs this build does not implement, in
// the order given; nil when it implements them all.
func Lacking(needs []string) []string {
	var out []string
	for _, f := range needs {
		if !Implements(f) {
			out = append(out, f)
		}
	}
	return out
}

// needSet gathers features without repeats.
type needSet []string

func (s *needSet) add(f string) {
	if f != "" && !slices.Contains(*s, f) {
		*s = append(*s, f)
	}
}

func (s *needSet) addIf(cond bool, f string) {
	if cond {
		s.add(f)
	}
}

// sorted is the set in a stable order, nil when empty.
func (s needSet) sorted() []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone([]string(s))
	slices.Sort(out)
	return out
}

// FormatNeeds is needs as HeaderNeeds carries them: comma separated.
func FormatNeeds(needs []string) string { return strings.Join(needs, ",") }

// ParseNeeds reads a HeaderNeeds value; an empty one needs nothing.
func ParseNeeds(h string) []string {
	if h == "" {
		return nil
	}
	var out []string
	for f := range strings.SplitSeq(h, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// LackError reports work that needs features this build does not
// implement. By is the aerie version that wrote the work, one that has
// them; empty when the writer did not say.
type LackError struct {
	// What is the work: "run r", or a message of it.
	What    string
	Lacking []string
	By      string
}

func (e *LackError) Error() string {
	by := "a newer aerie"
	if e.By != "" {
		by = "aerie " + e.By
	}
	return fmt.Sprintf("%s needs %s %s, which %s has and this aerie (%s) lacks: upgrade aerie on this host",
		e.What, plural(len(e.Lacking), "feature"), strings.Join(e.Lacking, ", "), by, BuildVersion())
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// CheckNeeds returns a *LackError when this build lacks any of needs,
// written by the aerie version by, for the work called what.
func CheckNeeds(what string, needs []string, by string) error {
	if l := Lacking(needs); len(l) > 0 {
		return &LackError{What: what, Lacking: l, By: by}
	}
	return nil
}

// LackOf is why this build cannot handle m's run: the features it needs
// that the build lacks, with the version that wrote it; nil when it has
// them all.
func LackOf(m *Manifest) *LackError {
	if l := Lacking(m.Needs); len(l) > 0 {
		return &LackError{What: "run " + m.Run, Lacking: l, By: m.WrittenBy}
	}
	return nil
}

// paramsNeeds adds what p needs.
func paramsNeeds(s *needSet, p *Params) {
	if p == nil {
		return
	}
	s.addIf(p.TopK != nil || p.MinP != nil || p.PresencePenalty != nil || p.FrequencyPenalty != nil ||
		p.RepetitionPenalty != nil || p.Seed != nil || len(p.Stop) > 0 || p.ReasoningEffort != "" ||
		len(p.ChatTemplateKwargs) > 0 || len(p.ExtraBody) > 0, FeatureSamplingControls)
}

// messagesNeeds adds what msgs need: generated turns' reasoning, finish
// reasons and usage come with --turns all, token ids with token-ids.
func messagesNeeds(s *needSet, msgs []Message) {
	for i := range msgs {
		m := &msgs[i]
		s.addIf(m.Reasoning != "" || m.FinishReason != "" || m.Usage != nil, FeatureTurnsAll)
		s.addIf(len(m.PromptTokenIDs) > 0 || len(m.TokenIDs) > 0, FeatureTokenIDs)
	}
}

// Uses is the features the run's settings use. Manifest.Needs holds
// them, and any the run was produced to need besides, once the manifest
// is encoded or decoded.
func (m *Manifest) Uses() []string {
	var s needSet
	s.add(TaskFeature(m.Task))
	s.addIf(m.Extraction != nil, FeatureTaskHiddenStates)
	s.addIf(m.Samples > 1, FeatureSamples)
	s.addIf(m.SamplesPerMessage > 1, FeatureSamplesInMessage)
	s.addIf(m.TurnsMode() == TurnsAll, FeatureTurnsAll)
	s.addIf(m.ContextReasoning != "" && m.ContextReasoning != ContextReasoningDrop, FeatureContextReasoning)
	s.addIf(m.ReturnTokenIDs, FeatureTokenIDs)
	s.addIf(m.Policy.Attempts() != DefaultMaxAttempts || m.Policy.Length() != OnLengthKeep || m.Policy.LengthRetryMaxTokens != 0, FeatureOnLength)
	paramsNeeds(&s, &m.Params)
	return s.sorted()
}

// Uses is the features the message's own fields use. HeaderNeeds adds
// the run's (see MessageNeeds).
func (p *Prompt) Uses() []string {
	var s needSet
	s.addIf(p.Sample > 0, FeatureSamples)
	s.addIf(p.Samples > 1, FeatureSamplesInMessage)
	s.addIf(p.MaxTokens > 0, FeaturePromptMaxTokens)
	s.addIf(p.Params != nil, FeaturePromptParams)
	s.addIf(len(p.InputIDs) > 0 || len(p.LossMask) > 0, FeatureTaskHiddenStates)
	paramsNeeds(&s, p.Params)
	messagesNeeds(&s, p.Messages)
	return s.sorted()
}

// Uses is the features the result's own fields use.
func (r *Result) Uses() []string {
	var s needSet
	s.addIf(r.Sample > 0, FeatureSamples)
	s.addIf(r.Turns > 1 || r.TurnsPlanned > 0, FeatureTurnsAll)
	s.addIf(len(r.PromptTokenIDs) > 0 || len(r.TokenIDs) > 0, FeatureTokenIDs)
	s.addIf(r.Simulated, FeatureSimulatedMark)
	s.addIf(r.HiddenStates != nil || len(r.InputIDs) > 0 || len(r.LossMask) > 0, FeatureTaskHiddenStates)
	paramsNeeds(&s, &r.Params)
	messagesNeeds(&s, r.Messages)
	return s.sorted()
}

// Uses is the features the dead letter's own fields use.
func (d *DeadLetter) Uses() []string {
	var s needSet
	s.addIf(d.Sample > 0, FeatureSamples)
	s.addIf(d.Turn > 0, FeatureTurnsAll)
	s.addIf(d.Params != nil, FeaturePromptParams)
	s.addIf(len(d.InputIDs) > 0 || len(d.LossMask) > 0, FeatureTaskHiddenStates)
	paramsNeeds(&s, d.Params)
	messagesNeeds(&s, d.Messages)
	return s.sorted()
}

// MessageNeeds is what HeaderNeeds says of a message of a run that needs
// run: the run's features and the message's own.
func MessageNeeds(run, own []string) []string { return union(run, own) }

// SetNeeds puts needs in h (HeaderNeeds), with this build's version
// (HeaderWrittenBy); nothing when needs is empty, as on every message of
// a run of version 1.
func SetNeeds(h nats.Header, needs []string) {
	if len(needs) == 0 {
		return
	}
	h.Set(HeaderNeeds, FormatNeeds(needs))
	h.Set(HeaderWrittenBy, BuildVersion())
}

// CheckHeader returns a *LackError when the message whose header is h,
// called what, needs features this build lacks.
func CheckHeader(what string, h nats.Header) error {
	v := h.Get(HeaderNeeds)
	if v == "" {
		return nil
	}
	return CheckNeeds(what, ParseNeeds(v), h.Get(HeaderWrittenBy))
}

// NeedsCache checks messages' HeaderNeeds, remembering the last value
// found satisfied: every message of a run carries the same, so it is
// read once, not once a message. The zero value remembers none; it is
// safe for concurrent use.
type NeedsCache struct{ ok atomic.Pointer[string] }

// Check is CheckHeader for a message of run.
func (c *NeedsCache) Check(run string, h nats.Header) error {
	v := h.Get(HeaderNeeds)
	if v == "" {
		return nil
	}
	if p := c.ok.Load(); p != nil && *p == v {
		return nil
	}
	if err := CheckNeeds("a message of run "+run, ParseNeeds(v), h.Get(HeaderWrittenBy)); err != nil {
		return err
	}
	c.ok.Store(&v)
	return nil
}

// union is a and b without repeats, sorted; nil when both are empty.
func union(a, b []string) []string {
	s := needSet(slices.Clone(a))
	for _, f := range b {
		s.add(f)
	}
	return s.sorted()
}
