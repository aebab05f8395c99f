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
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

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
	{"runs", "list the runs on the NATS server (ls) or remove everything one run has there (rm)", cmdRuns},
	{"sim", "serve the vLLM simulator (OpenAI-compatible)", cmdSim},
	{"gen-prompts", "write synthetic prompts (all accepted input shapes) for rehearsals", cmdGen},
	{"server", "run an embedded NATS server with JetStream, for several aerie processes on one machine", cmdServer},
	{"doctor", "check NATS, streams, the run's consumer and manifest, backend, model, context length, data dir and units before a run", cmdDoctor},
	{"version", "print the version", func(context.Context, []string) error { fmt.Println("aerie", version); return nil }},
}

func usage() {
	fmt.Fprintf(os.Stderr, "aerie turns prompts into training data through LLM servers, reliably, over NATS JetStream.\n\nUsage: aerie <command> [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'aerie <command> -h' for a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	name := os.Args[1]
	for _, c := range commands {
		if c.name != name {
			continue
		}
		// The first SIGINT/SIGTERM asks for a clean stop; a second one
		// kills the process as usual.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		go func() { <-ctx.Done(); stop() }()
		err := c.run(ctx, os.Args[2:])
		stop()
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				os.Exit(0)
			}
			fmt.Fprintf(os.Stderr, "aerie %s: %v\n", name, err)
			os.Exit(1)
		}
		return
	}
	fmt.Fprintf(os.Stderr, "aerie: unknown command %q\n\n", name)
	usage()
	os.Exit(2)
}
