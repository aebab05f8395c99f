package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/aerie-dev/aerie/spelling"
)

// configurable names the commands that take --config FILE: a YAML file
// whose keys are their flag names without dashes, as `vllm serve
// --config` takes. A flag on the command line wins over the environment,
// which wins over the file, which wins over the defaults.
var configurable = map[string]bool{"run": true, "produce": true, "work": true, "aggregate": true}

// errPrintedConfig ends a command that was asked for --print-config: it
// printed its settings and does nothing else (exit status 0).
var errPrintedConfig = errors.New("settings printed")

// envOfFlag finds the environment variable a flag's help names, as
// "(env AERIE_BACKEND)": every flag with one says so.
var envOfFlag = regexp.MustCompile(`\benv (AERIE_[A-Z0-9_]+)`)

// flagEnv returns the environment variable that sets f's default, or "".
func flagEnv(f *flag.Flag) string {
	if m := envOfFlag.FindStringSubmatch(f.Usage); m != nil {
		return m[1]
	}
	return ""
}

// addConfigFlags adds --config and --print-config to a configurable
// command. Their values are read before the other flags (see
// applyConfig); the flags exist so that help lists them and a value
// given twice is caught.
func addConfigFlags(fs *flag.FlagSet) {
	fs.String("config", "", "YAML `FILE` of settings: keys are this command's flag names without dashes (prompts: in.jsonl, max-tokens: 4096); a flag given here or its environment variable wins over the file")
	fs.Bool("print-config", false, "print every setting this command would run with, and where each came from (flag, env, file or default), then exit")
}

// settingSource is where a flag's value came from.
type settingSource string

const (
	fromFlag    settingSource = "flag"
	fromEnv     settingSource = "env"
	fromFile    settingSource = "file"
	fromDefault settingSource = "default"
)

// configRun is what applyConfig learned: which flags the command line
// and the file set.
type configRun struct {
	file    string
	fromArg map[string]bool
	fromCfg map[string]bool
}

// argFlags returns the names of the flags args sets, up to a "--".
func argFlags(args []string) map[string]bool {
	out := map[string]bool{}
	for _, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		out[name] = true
	}
	return out
}

// configPath returns the --config value among args ("" when none).
func configPath(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "config" {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// applyConfig sets fs's flags from the --config file among args, except
// those the command line or their environment variable sets. An unknown
// key fails at once, naming the nearest flag.
func applyConfig(fs *flag.FlagSet, args []string) (*configRun, error) {
	cr := &configRun{fromArg: argFlags(args), fromCfg: map[string]bool{}}
	cr.file = configPath(args)
	if cr.file == "" {
		return cr, nil
	}
	b, err := os.ReadFile(cr.file)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("--config %s: not a YAML mapping of flag names to values: %w", cr.file, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		name := strings.TrimLeft(key, "-")
		f := fs.Lookup(name)
		if f == nil || name == "config" || name == "print-config" {
			return nil, fmt.Errorf("--config %s: unknown key %q: %s", cr.file, key, nearestFlag(fs, name))
		}
		value, err := settingText(doc[key])
		if err != nil {
			return nil, fmt.Errorf("--config %s: key %s: %w", cr.file, key, err)
		}
		if cr.fromArg[name] {
			continue
		}
		if env := flagEnv(f); env != "" && os.Getenv(env) != "" {
			continue
		}
		if value == f.DefValue {
			// The default written out, as --print-config writes every
			// setting: nothing to set, and an empty value of a flag that
			// refuses one (a JSON object) is no error.
			cr.fromCfg[name] = true
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return nil, fmt.Errorf("--config %s: key %s: %w", cr.file, key, err)
		}
		cr.fromCfg[name] = true
	}
	return cr, nil
}

// settingText is a YAML value as its flag takes it: a scalar as written,
// a list joined with commas, a mapping as JSON (--extra-body,
// --chat-template-kwargs).
func settingText(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			s, err := settingText(e)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		b, err := json.Marshal(x)
		if err != nil {
			return "", fmt.Errorf("a mapping that is not JSON: %w", err)
		}
		return string(b), nil
	default:
		return fmt.Sprint(x), nil
	}
}

// nearestFlag names the flag of fs closest to name in spelling.
func nearestFlag(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "config" && f.Name != "print-config" {
			names = append(names, f.Name)
		}
	})
	best, _ := spelling.Nearest(name, names)
	if best == "" {
		return "this command takes no settings"
	}
	return fmt.Sprintf("the nearest flag is --%s (keys are flag names without dashes; see %s -h)", best, fs.Name())
}

// secretFlags are flags whose value is a secret itself (not a file
// holding one): --print-config shows only that they are set.
var secretFlags = map[string]bool{"api-key": true, "sim-api-key": true}

// printConfig writes fs's settings as YAML, each with where it came
// from, by group in the order of the command's help. Numbers and
// booleans are written as such, so the output read back as a --config
// file gives the same settings; a secret is written as "(set)", which
// must be replaced before the output is used so.
func printConfig(w io.Writer, fs *flag.FlagSet, cr *configRun) {
	first := true
	for _, g := range groupedFlags(fs) {
		flags := slices.DeleteFunc(slices.Clone(g.flags), func(f *flag.Flag) bool {
			return f.Name == "config" || f.Name == "print-config"
		})
		if len(flags) == 0 {
			continue
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		fmt.Fprintf(w, "# %s\n", g.title)
		for _, f := range flags {
			src := fromDefault
			switch {
			case cr.fromArg[f.Name]:
				src = fromFlag
			case cr.fromCfg[f.Name]:
				src = fromFile
			case flagEnv(f) != "" && os.Getenv(flagEnv(f)) != "":
				src = fromEnv + " " + settingSource(flagEnv(f))
			}
			var value any = f.Value.String()
			switch {
			case secretFlags[f.Name] && f.Value.String() != "":
				value = "(set)"
			default:
				value = typedValue(f)
			}
			b, _ := yaml.Marshal(map[string]any{f.Name: value})
			fmt.Fprintf(w, "%s  # %s\n", strings.TrimRight(string(b), "\n"), src)
		}
	}
}

// typedValue is f's value as YAML should write it: a number or a boolean
// for flags of those types, and for aerie's own kinds of value (an
// optional number, a window of N or auto) a number when the text is one;
// the flag's own text for everything else, durations included, which
// YAML would write as nanoseconds.
func typedValue(f *flag.Flag) any {
	text := f.Value.String()
	g, ok := f.Value.(flag.Getter)
	if !ok {
		// Only a number written back the same: "0077" (a umask, octal)
		// stays text.
		if i, err := strconv.ParseInt(text, 10, 64); err == nil && strconv.FormatInt(i, 10) == text {
			return i
		}
		if x, err := strconv.ParseFloat(text, 64); err == nil && strconv.FormatFloat(x, 'g', -1, 64) == text {
			return x
		}
		return text
	}
	switch v := g.Get().(type) {
	case bool, int, int64, uint, uint64, float64:
		return v
	default:
		return text
	}
}
