package engine

import (
	"fmt"
	"strings"
)

// Wants is what a run asks of the engine.
type Wants struct {
	// TokenIDs: the run stores token ids (--return-token-ids).
	TokenIDs bool
	// Priority, when not 0, is the priority the workers' requests carry
	// (--yield-to-serving), in aerie's sense (lower first).
	Priority int
	// Samples is the answers asked per prompt (--samples); 0 or 1 is one.
	Samples int
	// AutoWindow: the workers size their windows from the server's load
	// (--window auto).
	AutoWindow bool
	// Extraction: a hidden-states run (--task hidden-states).
	Extraction bool
}

// Verdict is what happens to a feature on an engine.
type Verdict int

const (
	// Works as on vLLM.
	Works Verdict = iota
	// Adapted: aerie does it another way on this engine, and says how.
	Adapted
	// Unsure: it depends on a setting the server does not show.
	Unsure
	// Refused: the engine cannot do it; nothing is queued.
	Refused
)

func (v Verdict) String() string {
	return [...]string{"works", "adapted", "unsure", "refused"}[v]
}

// Line is one feature on one engine.
type Line struct {
	Feature string
	Verdict Verdict
	// Text says what will happen; Fix, for Refused and Unsure, what to
	// do about it.
	Text, Fix string
}

func (l Line) String() string {
	s := l.Feature + ": " + l.Text
	if l.Fix != "" {
		s += " (" + l.Fix + ")"
	}
	return s
}

// Plan says, for each feature, what will happen on f: every feature a
// run always uses (reasoning, errors, health), then each that w asks
// for. A Refused line means the run must not start against f.
func (f Found) Plan(w Wants) []Line {
	lines := []Line{{Feature: "reasoning", Text: fmt.Sprintf("read from %q (the server needs %s)", f.Reasoning, f.ReasoningEnable)}}
	lines = append(lines, f.tokenIDs(w), f.priority(w), f.samples(w), f.load(w), f.extraction(w))
	errs := "in-band errors inside a 200 stream are tried again"
	if !f.ErrorsInStream {
		errs = "errors come as HTTP statuses"
	}
	lines = append(lines,
		Line{Feature: "errors", Text: errs + "; when busy: " + f.Busy},
		Line{Feature: "health", Text: "GET " + f.Health})
	out := lines[:0]
	for _, l := range lines {
		if l.Feature != "" {
			out = append(out, l)
		}
	}
	return out
}

func (f Found) tokenIDs(w Wants) Line {
	if !w.TokenIDs {
		return Line{}
	}
	l := Line{Feature: "token ids"}
	switch f.TokenIDs {
	case TokenIDsStreamed:
		l.Text = "return_token_ids on streamed answers"
	case TokenIDsUnstreamed:
		l.Verdict = Adapted
		l.Text = f.Title + " returns token ids only on answers that are not streamed: this run's requests go unstreamed, so each answer's tokens and TTFT are counted when it is whole, and --first-token-timeout bounds the whole answer"
	default:
		l.Verdict = Refused
		l.Text = f.Title + " returns no token ids on chat answers"
		l.Fix = "serve the run with vLLM 0.10.2 or later or with SGLang, or produce it without --return-token-ids"
	}
	return l
}

func (f Found) priority(w Wants) Line {
	if w.Priority == 0 {
		return Line{}
	}
	l := Line{Feature: "priority"}
	switch {
	case !f.Priority.Supported:
		l.Verdict = Refused
		l.Text = f.Title + " has no request priority, so the batch cannot yield to serving traffic"
		l.Fix = "run the workers without --yield-to-serving, or give interactive traffic a server of its own"
		return l
	case f.PriorityOn != nil && !*f.PriorityOn:
		l.Verdict = Refused
		l.Text = f.Title + " was started without priority scheduling: the batch would not yield"
		l.Fix = "start it with " + f.Priority.Enable + ", or run the workers without --yield-to-serving"
		return l
	}
	sent := string(f.Dialect.Priority.Encode(w.Priority))
	l.Text = fmt.Sprintf("batch requests carry priority %s (%s)", sent, f.Priority.Describe)
	if f.PriorityOn == nil && f.Name != VLLM {
		// vLLM refuses a priority without its policy, which the doctor's
		// priority check sees; the others ignore it silently.
		l.Verdict = Unsure
		l.Fix = "the server does not show whether it orders by priority: start it with " + f.Priority.Enable
	}
	return l
}

func (f Found) samples(w Wants) Line {
	if w.Samples <= 1 {
		return Line{}
	}
	if f.SamplesByN {
		return Line{Feature: "samples", Text: fmt.Sprintf("n=%d in one request (the prompt is read once)", w.Samples)}
	}
	return Line{Feature: "samples", Verdict: Adapted,
		Text: fmt.Sprintf("%s refuses n above 1: each prompt goes as %d requests of one answer, answer k with seed+k", f.Title, w.Samples)}
}

func (f Found) load(w Wants) Line {
	if !w.AutoWindow {
		return Line{}
	}
	names := strings.Join([]string{first(f.Load.Running), first(f.Load.Waiting), first(f.Load.KVUsage)}, ", ")
	l := Line{Feature: "load metrics", Text: fmt.Sprintf("--window auto reads %s at %s", names, f.Load.Path)}
	if f.MetricsOn == nil || !*f.MetricsOn {
		l.Verdict = Unsure
		l.Text = fmt.Sprintf("--window auto reads %s at %s, which the server does not serve: the workers keep the fixed --window", names, f.Load.Path)
		l.Fix = "give a fixed --window"
		if f.Load.Enable != "" {
			l.Fix = "start the server with " + f.Load.Enable + ", or give a fixed --window"
		}
	}
	return l
}

func (f Found) extraction(w Wants) Line {
	if !w.Extraction {
		return Line{}
	}
	if f.Name == VLLM {
		return Line{Feature: "hidden states", Text: "vLLM's extract_hidden_states method, through /v1/completions"}
	}
	return Line{Feature: "hidden states", Verdict: Refused,
		Text: f.Title + " does not write hidden states to files as vLLM's extract_hidden_states method does",
		Fix:  "extract with vLLM (docs: Extracting hidden states)"}
}

// ForRun is what a run of manifest-like settings asks of the engine,
// with the workers' own priority (0 when they do not yield).
func ForRun(tokenIDs bool, samples int, extraction bool, priority int) Wants {
	return Wants{TokenIDs: tokenIDs, Samples: samples, Extraction: extraction, Priority: priority}
}

func first(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// Refusals returns the Refused lines of a plan.
func Refusals(lines []Line) []Line {
	var out []Line
	for _, l := range lines {
		if l.Verdict == Refused {
			out = append(out, l)
		}
	}
	return out
}
