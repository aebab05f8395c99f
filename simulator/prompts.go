package simulator

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
)

// WritePrompts writes n synthetic prompts as JSONL, deterministic for a
// seed, for rehearsals and tests. Lines rotate through the three input
// shapes aerie accepts (messages, ShareGPT conversations with a trailing
// answer to regenerate, and a bare prompt), some with a system turn and
// some multi-turn, so a rehearsal exercises the parser as real data does.
func WritePrompts(w io.Writer, n int, seed int64) error {
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
