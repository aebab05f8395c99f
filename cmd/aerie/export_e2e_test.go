package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/simulator/simtest"
)

// A --turns all --return-token-ids --samples 2 run on aerie's embedded
// NATS server, exported as speculators, gives one row per generated turn
// of every sample: input_ids the turn's prompt ids then its answer ids,
// the loss on exactly the answer's completion_tokens, ids <id>#<s> for
// the last turn and <id>#<s>:t<k> before it.
func TestSpeculatorsExportOfARun(t *testing.T) {
	bin := buildAerie(t)
	root := t.TempDir()
	prompts := filepath.Join(root, "prompts.jsonl")
	data := filepath.Join(root, "data")
	out := filepath.Join(root, "spec.jsonl")
	for _, args := range [][]string{
		{"gen-prompts", "--count", "40", "--turns", "3", "--out", prompts},
		{"run", "--run", "ids", "--prompts", prompts, "--data-dir", data, "--sim-speed", "2000", "--event-interval", "100ms",
			"--turns", "all", "--return-token-ids", "--samples", "2"},
		{"export", "--run", "ids", "--data-dir", data, "--format", "speculators", "--allow-simulated", "--drop", "none", "--out", out},
	} {
		aerie(t, bin, args...).wait(t, 5*time.Minute)
	}

	// What the run generated: every turn of every line.
	want := map[string]int{} // row id -> completion tokens
	lines := 0
	readLinesOf(t, filepath.Join(data, "ids", "completions.jsonl"), func(b []byte) {
		var l struct {
			ID       string `json:"id"`
			Sample   int    `json:"sample"`
			Messages []struct {
				Usage *struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			} `json:"messages"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			TokenIDs []int `json:"token_ids"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		lines++
		id := l.ID
		if l.Sample > 0 {
			id = fmt.Sprintf("%s#%d", l.ID, l.Sample)
		}
		k, last := 0, l.Usage.CompletionTokens
		for _, m := range l.Messages {
			if m.Usage != nil {
				k++
				want[fmt.Sprintf("%s:t%d", id, k)] = m.Usage.CompletionTokens
				last -= m.Usage.CompletionTokens
			}
		}
		want[id] = last
		if len(l.TokenIDs) != last {
			t.Errorf("%s: %d answer token ids stored, usage says %d", id, len(l.TokenIDs), last)
		}
	})
	if lines != 80 {
		t.Fatalf("%d lines, want 40 prompts x 2 samples", lines)
	}

	rows := 0
	readLinesOf(t, out, func(b []byte) {
		var r struct {
			ID        string `json:"id"`
			PrimaryID string `json:"primary_id"`
			InputIDs  []int  `json:"input_ids"`
			LossMask  []int  `json:"loss_mask"`
			Metadata  struct {
				Usage struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
				Simulated bool `json:"simulated"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		rows++
		tokens, ok := want[r.ID]
		if !ok {
			t.Errorf("row %s is no generated turn of the run", r.ID)
			return
		}
		delete(want, r.ID)
		u := r.Metadata.Usage
		if len(r.InputIDs) != len(r.LossMask) || len(r.InputIDs) != u.PromptTokens+u.CompletionTokens || u.CompletionTokens != tokens {
			t.Errorf("%s: %d ids, %d mask, usage %+v, generated %d", r.ID, len(r.InputIDs), len(r.LossMask), u, tokens)
			return
		}
		for i, m := range r.LossMask {
			if want := i >= u.PromptTokens; (m == 1) != want {
				t.Errorf("%s: loss_mask[%d] = %d with a prompt of %d tokens", r.ID, i, m, u.PromptTokens)
				return
			}
		}
		if !r.Metadata.Simulated {
			t.Errorf("%s: a simulated answer not marked in its metadata", r.ID)
		}
	})
	if len(want) != 0 || rows <= lines {
		t.Errorf("%d rows of %d lines; generated turns without a row: %v", rows, lines, want)
	}
}

func readLinesOf(t *testing.T, path string, fn func([]byte)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		fn(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// aerie run --return-token-ids against a server that answers without
// token ids (here the simulator behind a proxy that drops the request's
// return_token_ids, as a server that does not know it) stops at its
// preflight, before anything is queued or stored, and says why.
func TestRunWithoutTokenIDsStopsAtPreflight(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	simAddr := freeAddr(t)
	start(t, bin, "sim", "--listen", simAddr, "--speed", "500")
	waitTCP(t, simAddr)
	proxyURL := simtest.ChatProxy(t, "http://"+simAddr, func(body map[string]any) {
		delete(body, "return_token_ids") // as a server that does not know it
	})
	prompts := filepath.Join(dir, "prompts.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "20", "--out", prompts).wait(t, time.Minute)
	p := aerie(t, bin, "run", "--run", "noids", "--prompts", prompts, "--data-dir", filepath.Join(dir, "data"),
		"--backend", proxyURL, "--return-token-ids")
	if code := p.exit(t, 2*time.Minute); code == 0 || !strings.Contains(p.stderr.String(), "without the token ids the run asks for") {
		t.Errorf("exit %d:\n%s", code, p.stderr.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "data", "noids", "completions.jsonl")); err == nil && len(b) > 0 {
		t.Errorf("answers stored: %d bytes", len(b))
	}
}
