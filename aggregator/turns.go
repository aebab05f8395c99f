package aggregator

import (
	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/dataset/lineindex"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

// The throughput estimate counts requests (turns), not lines: with
// --turns all a line is a conversation of one or more generated turns.
// These read, from a result or an output line, the requests it took, and
// from a failure, how many of the run's requests it accounts for.

// turnHead is what the estimate needs of a message: an assistant turn
// generated with --turns all carries its own usage and finish reason.
type turnHead struct {
	Role         string        `json:"role"`
	FinishReason string        `json:"finish_reason"`
	Usage        *schema.Usage `json:"usage"`
}

func turnHeads(msgs []schema.Message) []turnHead {
	out := make([]turnHead, len(msgs))
	for i, m := range msgs {
		out[i] = turnHead{Role: m.Role, FinishReason: m.FinishReason, Usage: m.Usage}
	}
	return out
}

// resultSummary is the summary of the completions.jsonl line of a
// result, as the line index keeps it.
func resultSummary(r *schema.Result) lineindex.Summary {
	l := dataset.NewCompletionLine(r)
	return lineindex.Summarize(&l)
}

// answerOf returns the requests a line took. With --turns last (turnsAll
// false) that is one, its whole usage. With --turns all the line's
// Turns were generated: the first Turns-1 assistant messages are the
// earlier ones, each with its own usage, and the last one's tokens are
// what the summed usage leaves. A conversation cut at max_tokens and kept
// (Truncated) before its last turn has turns that will never run: as
// many as its assistant messages plus one (the turns it was planned to
// have) exceed Turns.
func answerOf(s *lineindex.Summary, turnsAll bool) throughput.Answer {
	last := throughput.Request{CompletionTokens: s.CompletionTokens, Truncated: s.FinishReason == "length"}
	if !turnsAll {
		return throughput.Answer{Requests: []throughput.Request{last}, LengthHint: s.LengthHint}
	}
	turns := max(s.Turns, 1)
	a := throughput.Answer{Requests: make([]throughput.Request, 0, turns), LengthHint: s.LengthHint}
	earlier := 0
	for i, t := range s.Assistants {
		if i+1 >= turns {
			break // not generated: the conversation ended before it
		}
		r := throughput.Request{CompletionTokens: t.CompletionTokens, Truncated: t.Cut}
		earlier += r.CompletionTokens
		a.Requests = append(a.Requests, r)
	}
	last.CompletionTokens = max(last.CompletionTokens-earlier, 0)
	a.Requests = append(a.Requests, last)
	planned := len(s.Assistants) + 1
	if s.TurnsPlanned > 0 {
		planned = s.TurnsPlanned
	}
	if s.Truncated && planned > len(a.Requests) {
		a.Skipped = planned - len(a.Requests)
	}
	return a
}

// failedRequests is how many of the run's requests a failed unit
// accounts for: 1 with --turns last; with --turns all every turn of its
// conversation (schema.TurnSlots), those stored before the failed one
// being finished and the others never to run.
func failedRequests(msgs []turnHead, turnsAll bool) int {
	if !turnsAll {
		return 1
	}
	n := 1
	for _, m := range msgs {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}
