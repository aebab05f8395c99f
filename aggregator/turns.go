package aggregator

import (
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

// completionHead is what the estimate reads of a completions.jsonl line.
type completionHead struct {
	Messages     []turnHead   `json:"messages"`
	FinishReason string       `json:"finish_reason"`
	Truncated    bool         `json:"truncated"`
	Turns        int          `json:"turns"`
	TurnsPlanned int          `json:"turns_planned"`
	Usage        schema.Usage `json:"usage"`
	LengthHint   int          `json:"length_hint"`
}

func resultHead(r *schema.Result) completionHead {
	return completionHead{
		Messages: turnHeads(r.Messages), FinishReason: r.FinishReason, Truncated: r.Truncated,
		Turns: r.Turns, TurnsPlanned: r.TurnsPlanned, Usage: schema.Usage{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens},
		LengthHint: r.LengthHint,
	}
}

// answer returns the requests a line took. With --turns last (turnsAll
// false) that is one, its whole usage. With --turns all the line's
// Turns were generated: the first Turns-1 assistant messages are the
// earlier ones, each with its own usage, and the last one's tokens are
// what the summed usage leaves. A conversation cut at max_tokens and kept
// (Truncated) before its last turn has turns that will never run: as
// many as its assistant messages plus one (the turns it was planned to
// have) exceed Turns.
func (h completionHead) answer(turnsAll bool) throughput.Answer {
	last := throughput.Request{CompletionTokens: h.Usage.CompletionTokens, Truncated: h.FinishReason == "length"}
	if !turnsAll {
		return throughput.Answer{Requests: []throughput.Request{last}, LengthHint: h.LengthHint}
	}
	turns := max(h.Turns, 1)
	a := throughput.Answer{Requests: make([]throughput.Request, 0, turns), LengthHint: h.LengthHint}
	assistants := 0
	earlier := 0
	for _, m := range h.Messages {
		if m.Role != "assistant" {
			continue
		}
		assistants++
		if assistants >= turns {
			continue // not generated: the conversation ended before it
		}
		r := throughput.Request{Truncated: m.FinishReason == "length"}
		if m.Usage != nil {
			r.CompletionTokens = m.Usage.CompletionTokens
		}
		earlier += r.CompletionTokens
		a.Requests = append(a.Requests, r)
	}
	last.CompletionTokens = max(last.CompletionTokens-earlier, 0)
	a.Requests = append(a.Requests, last)
	planned := assistants + 1
	if h.TurnsPlanned > 0 {
		planned = h.TurnsPlanned
	}
	if h.Truncated && planned > len(a.Requests) {
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
