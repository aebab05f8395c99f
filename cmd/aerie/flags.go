package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/aerie-dev/aerie/schema"
)

// newFlags returns a flag set for a command with the logging flags every
// command has.
func newFlags(name, synopsis string) (*flag.FlagSet, *logFlags) {
	fs := flag.NewFlagSet("aerie "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: aerie %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	lf := &logFlags{}
	fs.StringVar(&lf.level, "log-level", envOr("AERIE_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env AERIE_LOG_LEVEL)")
	fs.StringVar(&lf.format, "log-format", envOr("AERIE_LOG_FORMAT", "text"), "log format: text or json (env AERIE_LOG_FORMAT)")
	return fs, lf
}

type logFlags struct{ level, format string }

// logger builds the process logger, writing to w.
func (lf *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(lf.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", lf.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch lf.format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: use text or json", lf.format)
	}
	l := slog.New(h)
	slog.SetDefault(l)
	return l, nil
}

// natsFlags are the connection flags of every command that talks to NATS.
type natsFlags struct {
	url, creds string
}

func addNATSFlags(fs *flag.FlagSet) *natsFlags {
	nf := &natsFlags{}
	fs.StringVar(&nf.url, "nats", envOr("AERIE_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma separated (env AERIE_NATS_URL)")
	fs.StringVar(&nf.creds, "creds", os.Getenv("AERIE_NATS_CREDS"), "NATS credentials file (env AERIE_NATS_CREDS)")
	return nf
}

// parseRunFlags parses the flags of a command that works on one run, sets
// up the logger and checks --run.
func parseRunFlags(fs *flag.FlagSet, lf *logFlags, args []string, run *string) (*slog.Logger, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return nil, err
	}
	if err := requireRun(*run); err != nil {
		return nil, err
	}
	return log, nil
}

// requireRun checks the --run flag.
func requireRun(run string) error {
	if run == "" {
		return errors.New("--run is required: name the run (e.g. --run kimi-k25-25k)")
	}
	return schema.ValidateRun(run)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// optionalFloat is a float flag that remembers whether it was set, so an
// unset sampling parameter is left to the backend's default.
type optionalFloat struct{ v *float64 }

func (o *optionalFloat) String() string {
	if o.v == nil {
		return ""
	}
	return fmt.Sprint(*o.v)
}

func (o *optionalFloat) Set(s string) error {
	var f float64
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "%g", &f); err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	o.v = &f
	return nil
}
