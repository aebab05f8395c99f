package simulator

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// WritePrompts writes n synthetic prompts as JSONL, deterministic for a
// seed, for rehearsals and tests. Lines rotate through the three input
// shapes aerie accepts (messages, ShareGPT conversations with a trailing
// answer to regenerate, and a bare prompt), some with a system turn and
// some multi-turn, so a rehearsal exercises the parser as real data does.
// It is WritePromptsWith with the zero PromptOptions.
func WritePrompts(w io.Writer, n int, seed int64) error {
	return WritePromptsWith(w, n, seed, PromptOptions{})
}

// PromptOptions shape the prompts WritePromptsWith writes. The zero
// value writes what WritePrompts always has.
type PromptOptions struct {
	// Turns, above 1, makes every line a conversation of 1 to Turns user
	// turns (each count equally likely), every user turn but the last
	// followed by an assistant answer, as in a multi-turn data set: the
	// input of a run with --turns all. 0 or 1 write WritePrompts' mix, in
	// which one line in four has two user turns.
	Turns int
}

// WritePromptsWith writes n synthetic prompts as JSONL, shaped by opts,
// deterministic for a seed and opts.
func WritePromptsWith(w io.Writer, n int, seed int64, opts PromptOptions) error {
	if opts.Turns > 1 {
		return writeConversations(w, n, seed, opts.Turns)
	}
	r := rand.New(rand.NewPCG(uint64(seed), 0x61657269))
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for i := range n {
		id := fmt.Sprintf("q%07d", i)
		q := question(r)
		var line any
		switch i % 4 {
		case 0:
			line = map[string]any{"id": id, "messages": []map[string]string{{"role": "user", "content": q}}}
		case 1:
			line = map[string]any{"id": id, "messages": []map[string]string{
				{"role": "system", "content": "You are a careful assistant. Think step by step."},
				{"role": "user", "content": q},
			}}
		case 2:
			line = map[string]any{"id": id, "conversations": []map[string]string{
				{"from": "human", "value": question(r)},
				{"from": "gpt", "value": "An earlier answer."},
				{"from": "human", "value": q},
				{"from": "gpt", "value": "The answer to be regenerated."},
			}}
		default:
			line = map[string]any{"id": id, "prompt": q}
		}
		if err := enc.Encode(line); err != nil {
			return fmt.Errorf("write prompt %d: %w", i, err)
		}
	}
	return bw.Flush()
}

// writeConversations writes n conversations of 1 to maxTurns user turns.
// Lines rotate through the shapes a multi-turn data set comes in:
// messages ending with the user's turn, messages ending with an answer
// (dropped, as the one to regenerate), and ShareGPT conversations with a
// trailing answer; every other line has a system turn.
func writeConversations(w io.Writer, n int, seed int64, maxTurns int) error {
	r := rand.New(rand.NewPCG(uint64(seed), 0x7475726e73))
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for i := range n {
		id := fmt.Sprintf("c%07d", i)
		turns := 1 + r.IntN(maxTurns)
		type turn struct{ role, text string }
		var conv []turn
		if i%2 == 1 {
			conv = append(conv, turn{"system", "You are a careful assistant. Think step by step."})
		}
		for t := range turns {
			conv = append(conv, turn{"user", question(r)})
			if t < turns-1 || i%3 != 0 {
				conv = append(conv, turn{"assistant", earlierAnswer(r)})
			}
		}
		var line map[string]any
		if i%3 == 2 {
			from := map[string]string{"system": "system", "user": "human", "assistant": "gpt"}
			msgs := make([]map[string]string, len(conv))
			for j, c := range conv {
				msgs[j] = map[string]string{"from": from[c.role], "value": c.text}
			}
			line = map[string]any{"id": id, "conversations": msgs}
		} else {
			msgs := make([]map[string]string, len(conv))
			for j, c := range conv {
				msgs[j] = map[string]string{"role": c.role, "content": c.text}
			}
			line = map[string]any{"id": id, "messages": msgs}
		}
		if err := enc.Encode(line); err != nil {
			return fmt.Errorf("write conversation %d: %w", i, err)
		}
	}
	return bw.Flush()
}

// earlierAnswer makes up a short answer, as an earlier turn of a data set has.
func earlierAnswer(r *rand.Rand) string {
	return fmt.Sprintf("In short, %s comes down to %s; the rest follows from it.",
		subjects[r.IntN(len(subjects))], subjects[r.IntN(len(subjects))])
}

var (
	verbs    = []string{"Explain", "Prove", "Compare", "Derive", "Summarise", "Critique", "Design", "Estimate", "Debug", "Translate"}
	subjects = []string{"the central limit theorem", "a lock-free queue", "Dijkstra's algorithm", "the Krebs cycle", "speculative decoding",
		"a B-tree split", "the Fourier transform", "Raft leader election", "photosynthesis", "a Bloom filter", "the halting problem",
		"KV-cache paging", "gradient checkpointing", "Byzantine fault tolerance", "the Black-Scholes equation", "a red-black tree"}
	angles = []string{"for a first-year student", "with a worked example", "and list its failure modes", "in under 200 words",
		"step by step, checking each step", "with Go code", "and give the complexity", "as a short dialogue"}
)

func question(r *rand.Rand) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s.", verbs[r.IntN(len(verbs))], subjects[r.IntN(len(subjects))], angles[r.IntN(len(angles))])
	// Some prompts carry context, as long-context data sets do.
	for range r.IntN(4) {
		fmt.Fprintf(&b, " Consider also %s.", subjects[r.IntN(len(subjects))])
	}
	return b.String()
}

// WriteSamples writes n synthetic samples of hidden-state extraction as
// JSONL rows, as aerie's speculators export writes them ({"id",
// "input_ids", "loss_mask"}), deterministic for a seed: lengths
// lognormal around 300 tokens (8 to 4,000), ids below vocab, the first
// quarter to half of each masked as prompt.
func WriteSamples(w io.Writer, n int, seed int64, vocab int) error {
	r := rand.New(rand.NewPCG(uint64(seed), 0x68696464))
	bw := bufio.NewWriterSize(w, 1<<16)
	for i := range n {
		k := int(math.Exp(math.Log(300) + 0.8*r.NormFloat64()))
		k = min(max(k, 8), 4000)
		prompt := k/4 + r.IntN(k/4+1)
		fmt.Fprintf(bw, `{"id":"s%07d","input_ids":[`, i)
		for t := range k {
			if t > 0 {
				bw.WriteByte(',')
			}
			bw.WriteString(strconv.Itoa(r.IntN(vocab)))
		}
		bw.WriteString(`],"loss_mask":[`)
		for t := range k {
			if t > 0 {
				bw.WriteByte(',')
			}
			if t < prompt {
				bw.WriteByte('0')
			} else {
				bw.WriteByte('1')
			}
		}
		bw.WriteString("]}\n")
	}
	return bw.Flush()
}
