package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/simulator"
)

func cmdGen(_ context.Context, args []string) error {
	fs, _ := newFlags("gen-prompts", "--count N --out FILE [--seed N] [--turns N]")
	count := fs.Int("count", 25000, "number of prompts")
	out := fs.String("out", "", "output JSONL file")
	seed := fs.Int64("seed", 1, "seed")
	task := fs.String("task", "chat", "chat (prompts) or hidden-states (samples of token ids and loss masks, as aerie export --format speculators writes them, for aerie run --task hidden-states)")
	vocab := fs.Int("vocab-size", simulator.DefaultVocabSize, "with --task hidden-states: token ids are below this")
	turns := fs.Int("turns", 1, "most user turns per conversation: above 1, every line has 1 to N user turns, each but the last followed by an assistant answer (input for --turns all); 1 writes the usual mix of shapes")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" || *count < 1 {
		return errors.New("--out FILE and a positive --count are required")
	}
	if *turns < 1 {
		return fmt.Errorf("--turns %d: give 1 or more user turns per conversation", *turns)
	}
	if err := os.MkdirAll(filepath.Dir(*out), fsmode.Dir); err != nil {
		return err
	}
	// Written beside the output and renamed over it: a file that was
	// there keeps its mode, a new one gets the umask's.
	f, err := fsmode.CreateTemp(*out, filepath.Base(*out)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename, a no-op
	w := bufio.NewWriter(f)
	write := func() error {
		return simulator.WritePromptsWith(w, *count, *seed, simulator.PromptOptions{Turns: *turns})
	}
	noun := "prompts"
	switch *task {
	case "chat":
	case "hidden-states":
		write, noun = func() error { return simulator.WriteSamples(w, *count, *seed, *vocab) }, "samples"
	default:
		f.Close()
		return fmt.Errorf("--task %q: use chat or hidden-states", *task)
	}
	if err := write(); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	fmt.Printf("wrote %d %s to %s\n", *count, noun, *out)
	return nil
}
