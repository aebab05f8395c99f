package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// flagGroup is one heading of a command's help.
type flagGroup struct {
	title string
	names []string
}

// flagGroups orders every command's help: common flags first (what goes
// in, what it talks to, where it goes), then one group per concern. A
// flag is listed under the first group that names it; a flag no group
// names goes under Advanced. Flag names mean the same in every command,
// so one table serves them all.
var flagGroups = []flagGroup{
	{"Common: input, backend and output", []string{
		"prompts", "run", "backend", "api-key-file", "model", "engine", "data-dir", "nats", "out",
		"task", "listen", "store", "format", "json", "watch", "count", "kind", "ids", "reason", "dry-run",
	}},
	{"Sampling: what each request asks the model for", []string{
		"max-tokens", "temperature", "top-p", "top-k", "min-p", "seed", "stop", "presence-penalty",
		"frequency-penalty", "repetition-penalty", "reasoning-effort", "chat-template-kwargs", "extra-body",
		"samples", "return-token-ids", "turns", "on-length", "length-retry-max-tokens", "system",
		"chat-template", "think-open", "think-close", "context-reasoning", "include-truncated",
	}},
	{"Scheduling and fleet: how much runs at once, and where", []string{
		"window", "max-window", "window-poll", "workers", "order", "priority", "weight", "yield-to-serving",
		"batch-priority", "serving-ttft-slo", "hedge", "hedge-max", "hand-back-after", "runs", "all-runs",
		"replicas", "max-ack-pending",
	}},
	{"Reliability: retries, timeouts and limits", []string{
		"grace", "ack-wait", "max-deliver", "max-attempts", "backend-wait", "connect-wait",
		"first-token-timeout", "request-timeout", "timeout", "completion-timeout", "lease-wait",
		"exit-when-done", "idle-timeout", "skip-invalid", "needs", "dedupe", "max-length", "allow-simulated",
	}},
	{"Observability: logs, metrics and the live page", []string{
		"log-level", "log-format", "metrics-listen", "http-listen", "event-interval", "interval",
	}},
	{"Security: credentials, TLS and file modes", []string{
		"nkey", "creds", "tls-ca", "tls-cert", "tls-key", "umask", "role", "auth-dir", "routes", "api-key",
	}},
	{"Simulator: the built-in vLLM simulator, its engines and its faults", []string{
		"sim-*", "fault-*", "speed", "lengths", "output-median", "output-sigma", "max-num-seqs",
		"kv-cache-tokens", "step-base", "step-per-seq", "prefill-per-token", "prefix-cache", "max-model-len",
		"scheduling-policy", "schedule-low-priority-values-first", "reasoning-field", "no-metrics",
		"max-queued-requests", "outage", "vocab-size", "hidden-states-path", "hidden-layer-ids",
		"hidden-size", "hidden-dtype", "dtype", "layer-ids",
	}},
	{"Config file", []string{"config", "print-config"}},
}

// advancedTitle heads the flags no group names.
const advancedTitle = "Advanced"

// groupOf returns the title of the group that lists name, and where in
// that group's list it is (flags are shown in that order).
func groupOf(name string) (title string, rank int) {
	for _, g := range flagGroups {
		for i, n := range g.names {
			if n == name || (strings.HasSuffix(n, "*") && strings.HasPrefix(name, strings.TrimSuffix(n, "*"))) {
				return g.title, i
			}
		}
	}
	return advancedTitle, 0
}

// printUsage writes a command's help: its synopsis, then its flags by
// group, each as --name with its value's name, wrapped at 80 columns.
func printUsage(w io.Writer, fs *flag.FlagSet, command, synopsis string) {
	fmt.Fprintf(w, "Usage: aerie %s %s\n", command, synopsis)
	for _, g := range groupedFlags(fs) {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, f := range g.flags {
			writeFlag(w, f)
		}
	}
}

// flagsOfGroup is one group's flags of a command, in the group's order.
type flagsOfGroup struct {
	title string
	flags []*flag.Flag
}

// groupedFlags returns fs's flags by group, in the order the help shows
// them; groups the command has no flag of are left out.
func groupedFlags(fs *flag.FlagSet) []flagsOfGroup {
	byGroup := map[string][]*flag.Flag{}
	fs.VisitAll(func(f *flag.Flag) {
		g, _ := groupOf(f.Name)
		byGroup[g] = append(byGroup[g], f)
	})
	for _, flags := range byGroup {
		slices.SortStableFunc(flags, func(a, b *flag.Flag) int {
			_, ra := groupOf(a.Name)
			_, rb := groupOf(b.Name)
			return ra - rb
		})
	}
	titles := make([]string, 0, len(flagGroups)+1)
	for _, g := range flagGroups {
		titles = append(titles, g.title)
	}
	titles = append(titles, advancedTitle)
	var out []flagsOfGroup
	for _, title := range titles {
		if flags := byGroup[title]; len(flags) > 0 {
			out = append(out, flagsOfGroup{title: title, flags: flags})
		}
	}
	return out
}

// writeFlag writes one flag's lines of help.
func writeFlag(w io.Writer, f *flag.Flag) {
	value, usage := flag.UnquoteUsage(f)
	line := "  --" + f.Name
	if value != "" {
		line += " " + value
	}
	fmt.Fprintln(w, line)
	if !zeroDefault(f) {
		if value == "string" {
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		} else {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
	}
	for _, l := range wrap(usage, 72) {
		fmt.Fprintln(w, "        "+l)
	}
}

// zeroDefault says whether a flag's default is its type's zero value,
// which help leaves unsaid.
func zeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]", "<nil>":
		return true
	}
	return false
}

// wrap breaks text into lines of at most width columns, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
