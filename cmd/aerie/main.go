// Command aerie turns a file of prompts into training data by running
// them through LLM servers, over NATS JetStream. See `aerie help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/schema"
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string) error
}

var commands = []command{
	{"run", "run a whole pipeline in one process: embedded NATS, simulator or --backend, producer, workers, aggregator", cmdRun},
	{"produce", "validate a prompts file and queue its prompts for a run (idempotent)", cmdProduce},
	{"work", "process a run's prompts against an OpenAI-compatible backend (one per GPU server)", cmdWork},
	{"aggregate", "write a run's completions.jsonl and failed.jsonl and publish throughput events", cmdAggregate},
	{"replay", "put a run's dead-lettered prompts back to work, by reason or id (--dry-run to look first)", cmdReplay},
	{"reconcile", "requeue every prompt of a run's input that is not completed, failed or on its way", cmdReconcile},
	{"export", "write a run's answers as SpecForge, ShareGPT, OpenAI Batch output, chat-template text or speculators token ids", cmdExport},
	{"report", "write a run's end-of-run report: one self-contained HTML file of charts, summary and parameters", cmdReport},
	{"verify", "check a hidden-states run's output as its trainer reads it: every file against its result and its row, nothing else", cmdVerify},
	{"auth", "write one nkey seed per role and the nats-server users.conf that grants each its permissions (auth init --out DIR)", cmdAuth},
	{"status", "show how a run is going (counts, failures by reason, rates, ETA, workers) or every run, from NATS alone; --watch redraws", cmdStatus},
	{"runs", "list the runs on the NATS server (ls) or remove everything one run has there (rm)", cmdRuns},
	{"sim", "serve the vLLM simulator (OpenAI-compatible)", cmdSim},
	{"gen-prompts", "write synthetic prompts (all accepted input shapes) for rehearsals", cmdGen},
	{"server", "run an embedded NATS server with JetStream, for several aerie processes on one machine", cmdServer},
	{"decode", "read a message from stdin (as nats --translate pipes it, or as the nats CLI prints it) and write it as JSON", cmdDecode},
	{"doctor", "check NATS, streams, the run's consumer and manifest, backend, model, context length, data dir and units before a run", cmdDoctor},
	{"completion", "print a bash or zsh script that completes commands, flags, run names and paths", cmdCompletion},
	{"version", "print the version (also aerie --version)", cmdVersion},
}

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // the command failed
	exitUsage = 2 // no command, or an unknown one
	// exitInUse: another process holds what this one needs (the run's
	// output, a NATS store). Restarting cannot help until an operator
	// acts, so deploy/'s units do not restart on it.
	exitInUse = 3
)

func usage() {
	fmt.Fprintf(os.Stderr, "aerie turns prompts into training data through LLM servers, reliably, over NATS JetStream.\n\nUsage: aerie <command> [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'aerie help <command>' or 'aerie <command> -h' for a command's flags.\n")
}

func main() {
	os.Exit(aerie(os.Args[1:]))
}

// aerie runs the command named by args[0] and returns the exit status.
func aerie(args []string) int {
	if len(args) == 0 {
		usage()
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		return help(args[1:])
	case "-version", "--version":
		return runCommand(lookup("version"), nil)
	case "__complete":
		// What the completion scripts call: candidates only, never an
		// error (a shell shows nothing rather than a message).
		_ = cmdComplete(context.Background(), args[1:])
		return exitOK
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(os.Stderr, "aerie: unknown command %q\n\n", args[0])
		usage()
		return exitUsage
	}
	return runCommand(c, args[1:])
}

// help prints the general usage, or with a command's name that
// command's usage and flags, as `aerie <command> -h` does.
func help(args []string) int {
	if len(args) == 0 || args[0] == "help" {
		usage()
		return exitOK
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(os.Stderr, "aerie help: unknown command %q\n\n", args[0])
		usage()
		return exitUsage
	}
	return runCommand(c, []string{"-h"})
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// runCommand runs c with its arguments until it returns or is
// interrupted, prints its error and returns the exit status.
func runCommand(c *command, args []string) int {
	// The first SIGINT/SIGTERM asks for a clean stop; a second one kills
	// the process as usual.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	stopProfile, err := startCPUProfile(os.Getenv("AERIE_CPU_PROFILE"))
	if err == nil {
		err = c.run(ctx, args)
		stopProfile()
	}
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp), errors.Is(err, errPrintedConfig):
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "aerie %s: %s\n", c.name, withoutOwnName(c.name, err.Error()))
	var held *aggregator.HeldError
	var store *broker.StoreInUseError
	if errors.As(err, &held) || errors.As(err, &store) {
		return exitInUse
	}
	return exitError
}

// withoutOwnName drops the command's name from the start of msg where a
// package began its error with it ("produce: ...", "produce run x: ...",
// "reconcile stopped at ..."), since "aerie <command>: " is printed
// before it. For run only "run: " goes: in "run x has no manifest" the
// word names a run.
func withoutOwnName(name, msg string) string {
	if rest, ok := strings.CutPrefix(msg, name+": "); ok {
		return rest
	}
	if name == "run" {
		return msg
	}
	if rest, ok := strings.CutPrefix(msg, name+" "); ok {
		return rest
	}
	return msg
}

func cmdVersion(_ context.Context, args []string) error {
	fs, _ := newFlags("version", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Println("aerie", schema.BuildVersion())
	fmt.Println("features:", strings.Join(schema.Implemented(), " "))
	return nil
}
