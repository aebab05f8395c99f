package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/worker"
)

func cmdWork(ctx context.Context, args []string) error {
	fs, lf := newFlags("work", "--run NAME --backend URL [--window 200] [--api-key-file F]")
	nf := addNATSFlags(fs)
	run := fs.String("run", "", "run name")
	backend := fs.String("backend", envOr("AERIE_BACKEND", "http://127.0.0.1:8000"), "OpenAI-compatible base URL of the LLM server (env AERIE_BACKEND)")
	window := fs.Int("window", worker.DefaultWindow, "prompts in flight on this worker, exactly")
	name := fs.String("name", "", "worker name in heartbeats and results (default <host>-<random>)")
	keyFile := fs.String("api-key-file", "", "file holding the backend API key (default: env AERIE_API_KEY, or none)")
	grace := fs.Duration("grace", worker.DefaultGrace, "on SIGINT/SIGTERM, time in-flight prompts get to finish before they are handed back")
	timeout := fs.Duration("request-timeout", 0, fmt.Sprintf("cap on one answer from request to last token, however steadily it streams; 0 means no cap (a request still fails when no first token comes within %v, or no byte for %v after it)",
		openai.DefaultFirstTokenTimeout, openai.DefaultIdleTimeout))
	log, err := parseRunFlags(fs, lf, args, run)
	if err != nil {
		return err
	}
	key, err := apiKey(*keyFile)
	if err != nil {
		return err
	}
	client, err := openai.New(openai.Config{BaseURL: *backend, APIKey: key, RequestTimeout: *timeout})
	if err != nil {
		return err
	}
	if err := preflightWorker(ctx, nf, *run, *backend, key, *window, log); err != nil {
		return err
	}
	nc, js, err := connect(nf, "aerie-work", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := worker.New(worker.Config{Run: *run, Name: *name, Window: *window, Grace: *grace, Logger: log}, js, client)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// apiKey reads the backend API key from a file, or AERIE_API_KEY. It is
// never logged.
func apiKey(file string) (string, error) {
	if file == "" {
		return os.Getenv("AERIE_API_KEY"), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--api-key-file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("--api-key-file %s is empty", file)
	}
	return key, nil
}

// preflightWorker runs the doctor's preflight before a worker starts, so
// that what can be seen at T+0 is reported at T+0. A backend that is not
// up yet is only a warning: vLLM takes minutes to load a model and the
// worker waits for it; everything else stops the worker here.
func preflightWorker(ctx context.Context, nf *natsFlags, run, backend, key string, window int, log *slog.Logger) error {
	err := doctor.Preflight(ctx, doctor.Config{NATSURL: nf.url, NATSCreds: nf.creds, Run: run, Backend: backend, APIKey: key, Window: window})
	var pe *doctor.PreflightError
	if !errors.As(err, &pe) {
		return err
	}
	var fatal []string
	for _, c := range pe.Report.Checks {
		if c.Status != doctor.Fail {
			continue
		}
		switch c.Name {
		case "backend", "completion":
			log.Warn("preflight: backend not ready; the worker waits for it", "check", c.Name, "detail", c.Detail)
		default:
			fatal = append(fatal, c.Name+": "+c.Detail+" (fix: "+c.Fix+")")
		}
	}
	if len(fatal) > 0 {
		return fmt.Errorf("preflight failed: %s", strings.Join(fatal, "; "))
	}
	return nil
}
