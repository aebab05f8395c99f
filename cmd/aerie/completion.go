package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/schema"
)

// completeFiles is what `aerie __complete` prints when the word being
// completed is a path: the shell scripts then complete file names.
const completeFiles = "__files__"

// subcommands are the words a command takes before its flags.
var subcommands = map[string][]string{"auth": {"init"}, "runs": {"ls", "set", "rm"}}

// pathFlags take a file or directory.
var pathFlags = map[string]bool{
	"prompts": true, "config": true, "out": true, "data-dir": true, "api-key-file": true, "nkey": true,
	"creds": true, "tls-ca": true, "tls-cert": true, "tls-key": true, "store": true, "auth-dir": true,
	"units": true, "lengths": true, "hidden-states-path": true, "sim-hidden-states-path": true, "sim-lengths": true,
}

// runFlags take a run name, or with --runs a list of them.
var runFlags = map[string]bool{"run": true, "runs": true}

// completionTimeout bounds asking the NATS server for run names: a
// shell waiting on a TAB should not wait on a server that does not answer.
const completionTimeout = 2 * time.Second

// usageOutput, when set, receives the commands' help instead of stderr:
// completion reads each command's flags from it.
var usageOutput io.Writer

func cmdCompletion(_ context.Context, args []string) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(os.Stderr, completionHelp)
		return flag.ErrHelp
	}
	if len(args) != 1 {
		fmt.Fprint(os.Stderr, completionHelp)
		return errors.New("name the shell: bash or zsh")
	}
	switch args[0] {
	case "bash":
		fmt.Print(bashCompletion)
	case "zsh":
		fmt.Print(zshCompletion)
	default:
		return fmt.Errorf("no completion for %q: bash or zsh", args[0])
	}
	return nil
}

const completionHelp = `Usage: aerie completion bash|zsh

Prints a script that completes aerie's commands, flags, run names (asked
of the NATS server of --nats or AERIE_NATS_URL, with the command's
credentials, for at most 2 s) and file paths. Load it in the current shell
with

    source <(aerie completion bash)      # or zsh

or install it for every shell:

    aerie completion bash | sudo tee /etc/bash_completion.d/aerie
    aerie completion zsh > "${fpath[1]}/_aerie"
`

// bashCompletion asks aerie for the candidates of the word being
// completed; "__files__" hands it to the shell's file completion.
const bashCompletion = `# bash completion for aerie: source <(aerie completion bash)
_aerie() {
    local cur=${COMP_WORDS[COMP_CWORD]} out
    out=$(command aerie __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null) || return
    if [[ $out == __files__ ]]; then
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        return
    fi
    mapfile -t COMPREPLY < <(compgen -W "$out" -- "$cur")
}
complete -F _aerie aerie
`

// zshCompletion does the same for zsh, as an autoloaded function or
// sourced.
const zshCompletion = `#compdef aerie
# zsh completion for aerie: source <(aerie completion zsh)
_aerie() {
    local -a out
    out=("${(@f)$(command aerie __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    if [[ ${out[1]} == __files__ ]]; then
        _files
        return
    fi
    compadd -- "${(@)out:#}"
}
if [[ $funcstack[1] == _aerie ]]; then
    _aerie "$@"
else
    compdef _aerie aerie
fi
`

// cmdComplete prints the candidates for the last of words (the command
// line after "aerie", the last word being completed, maybe empty), one
// a line. It is what the scripts above call; it prints nothing rather
// than fail.
func cmdComplete(ctx context.Context, words []string) error {
	for _, c := range complete(ctx, words) {
		fmt.Println(c)
	}
	return nil
}

func complete(ctx context.Context, words []string) []string {
	if len(words) == 0 {
		words = []string{""}
	}
	cur := words[len(words)-1]
	if len(words) == 1 {
		names := []string{"help"}
		for _, c := range commands {
			names = append(names, c.name)
		}
		return names
	}
	name := words[0]
	if name == "help" || name == "completion" {
		if name == "completion" {
			return []string{"bash", "zsh"}
		}
		return complete(ctx, words[1:])
	}
	c := lookup(name)
	if c == nil {
		return nil
	}
	rest := words[1 : len(words)-1]
	sub := subcommands[name]
	var prefix []string
	if len(sub) > 0 {
		if len(rest) == 0 {
			return sub
		}
		prefix, rest = rest[:1], rest[1:]
	}
	if strings.HasPrefix(cur, "-") {
		return flagsOf(ctx, c, prefix)
	}
	if len(rest) > 0 {
		prev := strings.TrimLeft(rest[len(rest)-1], "-")
		if strings.HasPrefix(rest[len(rest)-1], "-") && !strings.Contains(prev, "=") {
			switch {
			case pathFlags[prev]:
				return []string{completeFiles}
			case runFlags[prev]:
				return runNames(ctx, words[1:len(words)-1])
			}
		}
	}
	return nil
}

// flagsOf lists a command's flags as --name, read from its help.
func flagsOf(ctx context.Context, c *command, prefix []string) []string {
	var b bytes.Buffer
	usageOutput = &b
	_ = c.run(ctx, append(slices.Clone(prefix), "-h"))
	usageOutput = nil
	var out []string
	for _, line := range strings.Split(b.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "  --"); ok {
			name, _, _ := strings.Cut(rest, " ")
			out = append(out, "--"+name)
		}
	}
	return out
}

// runNames asks the NATS server the words name (--nats, --nkey, --creds,
// --tls-*, else their environment variables and defaults) for the runs
// it holds; nothing when it does not answer in time.
func runNames(ctx context.Context, words []string) []string {
	fs := flag.NewFlagSet("complete", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	role := auth.Admin
	nf := addNATSFlags(fs, role)
	for i := 0; i < len(words); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(words[i], "-"), "=")
		f := fs.Lookup(name)
		if !strings.HasPrefix(words[i], "-") || f == nil {
			continue
		}
		if !hasValue && i+1 < len(words) {
			value, i = words[i+1], i+1
		}
		_ = fs.Set(name, value)
	}
	if nf.nkey != "" {
		if r, err := auth.ParseRole(strings.TrimSuffix(filepath.Base(nf.nkey), ".nk")); err == nil {
			nf.role = r
		}
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	opts, err := nf.authOptions()
	if err != nil {
		return nil
	}
	nc, err := nats.Connect(nf.url, append(opts, nats.Timeout(completionTimeout), nats.NoReconnect())...)
	if err != nil {
		return nil
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	kv, err := js.KeyValue(ctx, schema.RunsBucket)
	if err != nil {
		return nil
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for k := range keys.Keys() {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
