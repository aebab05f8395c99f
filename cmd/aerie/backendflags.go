package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/engine"
	"github.com/aerie-dev/aerie/openai"
)

// addBackendWaitFlag declares --backend-wait.
func addBackendWaitFlag(fs *flag.FlagSet) *waitFlag {
	return addWaitFlag(fs, "backend-wait", "AERIE_BACKEND_WAIT", doctor.DefaultBackendWait,
		"how long to wait at start-up for a backend that is starting (/health answers 503, or nothing listens yet) or sheds load (429, 5xx), trying again with a back-off and saying so every 30 s; a refused key, an unknown model or a 404 fail at once; 0 does not wait")
}

// The flags below are shared by several commands: each is declared here
// once, with one help text, and reads the same environment variable in
// every command. A command's own default, and what an empty value does
// there, is the only part that differs.

// backendFlags are --backend and --api-key-file.
type backendFlags struct{ url, keyFile string }

// addBackendFlags declares --backend, defaulting to AERIE_BACKEND, then
// def, and --api-key-file; note says what the command does with the
// backend, or with an empty --backend, when that is not plain.
func addBackendFlags(fs *flag.FlagSet, def, note string) *backendFlags {
	bf := &backendFlags{}
	help := "OpenAI-compatible base URL of the LLM server, e.g. http://127.0.0.1:8000 (env AERIE_BACKEND)"
	if note != "" {
		help += "; " + note
	}
	fs.StringVar(&bf.url, "backend", envOr("AERIE_BACKEND", def), help)
	fs.StringVar(&bf.keyFile, "api-key-file", "", "file holding the backend API key (default: env AERIE_API_KEY, or none); the key is never logged")
	return bf
}

// apiKey reads the backend API key from --api-key-file, or AERIE_API_KEY
// when no file is given.
func (bf *backendFlags) apiKey() (string, error) {
	if bf.keyFile == "" {
		return os.Getenv("AERIE_API_KEY"), nil
	}
	b, err := os.ReadFile(bf.keyFile)
	if err != nil {
		return "", fmt.Errorf("--api-key-file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("--api-key-file %s is empty", bf.keyFile)
	}
	return key, nil
}

// clientConfig is the backend client's configuration: with
// --api-key-file the client reads the key from the file, and reads it
// again when the backend refuses it (a worker paused on 401 resumes once
// the file holds the new key); otherwise AERIE_API_KEY.
func (bf *backendFlags) clientConfig() openai.Config {
	if bf.keyFile != "" {
		return openai.Config{BaseURL: bf.url, APIKeyFile: bf.keyFile}
	}
	return openai.Config{BaseURL: bf.url, APIKey: os.Getenv("AERIE_API_KEY")}
}

// addDataDirFlag declares --data-dir, defaulting to AERIE_DATA_DIR, then
// def; note says what else the command keeps there, or what an empty
// value does.
func addDataDirFlag(fs *flag.FlagSet, def, note string) *string {
	help := "output root: a run's completions.jsonl, failed.jsonl and events.jsonl are in <data-dir>/<run>/ (env AERIE_DATA_DIR)"
	if note != "" {
		help += "; " + note
	}
	return fs.String("data-dir", envOr("AERIE_DATA_DIR", def), help)
}

// defaultStore is aerie server's --store: the nats directory of
// AERIE_DATA_DIR when that is set, as aerie run keeps its store.
func defaultStore() string {
	if dir := os.Getenv("AERIE_DATA_DIR"); dir != "" {
		return filepath.Join(dir, "nats")
	}
	return "./data/nats"
}

// checkEngineFlag refuses an --engine that names no engine aerie knows,
// before anything starts.
func checkEngineFlag(name string) error {
	if name == "" || name == "auto" {
		return nil
	}
	if _, err := engine.Lookup(name); err != nil {
		return fmt.Errorf("--engine: %w", err)
	}
	return nil
}

// addEngineFlag declares --engine, defaulting to AERIE_ENGINE, then auto.
func addEngineFlag(fs *flag.FlagSet) *string {
	return fs.String("engine", envOr("AERIE_ENGINE", "auto"),
		"the engine serving --backend: "+strings.Join(engine.Names(), ", ")+", or auto to tell it from what the server shows (its /v1/models owned_by, its metric names, SGLang's /get_server_info); it sets the request fields, the priority scale, how token ids and several samples are asked for, and the metrics --window auto reads (env AERIE_ENGINE)")
}
