package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/schema"
)

// newFlags returns a flag set for a command with the logging flags every
// command has.
func newFlags(name, synopsis string) (*flag.FlagSet, *logFlags) {
	fs := flag.NewFlagSet("aerie "+name, flag.ContinueOnError)
	if usageOutput != nil {
		fs.SetOutput(usageOutput)
	}
	fs.Usage = func() { printUsage(fs.Output(), fs, name, synopsis) }
	lf := &logFlags{}
	fs.StringVar(&lf.level, "log-level", envOr("AERIE_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env AERIE_LOG_LEVEL)")
	fs.StringVar(&lf.format, "log-format", envOr("AERIE_LOG_FORMAT", "text"), "log format: text or json (env AERIE_LOG_FORMAT)")
	if configurable[name] {
		addConfigFlags(fs)
	}
	if writesFiles[name] {
		fs.Var(newUmaskFlag(), "umask", "octal `mask` of the permission bits taken away from every file and directory this command creates: the default keeps outputs, logs, locks and stores to their owner (files 0600, directories 0700); 0022 makes them readable by all (0644, 0755). Files that exist keep their mode, also when rewritten (env AERIE_UMASK)")
	}
	return fs, lf
}

// writesFiles names the commands that create files or directories, which
// take --umask.
var writesFiles = map[string]bool{
	"run": true, "aggregate": true, "export": true, "gen-prompts": true,
	"server": true, "auth init": true, "doctor": true, "report": true,
}

// parseFlags parses args into fs. Every input of a command is a flag, so
// an argument left over is a mistake (a flag without its dashes, or a
// value with a space in it), reported rather than ignored.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var cr *configRun
	if fs.Lookup("config") != nil {
		var err error
		if cr, err = applyConfig(fs, args); err != nil {
			return err
		}
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every input is a flag (see %s -h)", fs.Arg(0), fs.Name())
	}
	if f := fs.Lookup("umask"); f != nil {
		u := f.Value.(*umaskFlag)
		if u.envErr != nil {
			return u.envErr
		}
		fsmode.SetUmask(u.mask)
	}
	if f := fs.Lookup("print-config"); cr != nil && f != nil && f.Value.String() == "true" {
		printConfig(os.Stdout, fs, cr)
		return errPrintedConfig
	}
	return nil
}

// parseRunFlags parses the flags of a command that works on one run, sets
// up the logger and checks --run.
func parseRunFlags(fs *flag.FlagSet, lf *logFlags, args []string, run *string) (*slog.Logger, error) {
	if err := parseFlags(fs, args); err != nil {
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
