package doctor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aerie-dev/aerie/dataset"
)

// execKeys are the unit settings whose value is a command line.
var execKeys = []string{
	"ExecCondition", "ExecStartPre", "ExecStart", "ExecStartPost",
	"ExecReload", "ExecStop", "ExecStopPost",
}

// installDir is where deploy/README.md installs aerie and nats-server;
// a unit's command names a binary there when nothing better is known.
const installDir = "/usr/local/bin"

// unitCommand is one command line of a unit file.
type unitCommand struct {
	file  string // base name of the unit file
	line  int    // where the setting starts
	key   string // e.g. ExecStart
	value string // the command line as written
}

func (c unitCommand) where() string { return fmt.Sprintf("%s:%d", c.file, c.line) }

// unitsScan is what scanUnits found.
type unitsScan struct {
	files     int
	commands  int
	ok        []string // executables that exist and are executable
	unchecked []string // paths with a specifier or variable
	problems  []string
	fixes     []string
	err       error

	// Executables named by absolute path that cannot run, in the order
	// met, each reported once with every place that names it.
	bad    []string
	badWhy map[string]badExecutable
}

// badExecutable is an absolute program path that cannot run.
type badExecutable struct {
	why, fix string
	where    []string
}

// checkUnits makes sure every command of the systemd units calls its
// program by absolute path, and that the program is installed there. A
// unit that relies on PATH finds what systemd's fixed search path holds,
// not what the shell that installed it had (a virtualenv's bin, say): the
// program is not found, or another one runs.
func checkUnits(ctx context.Context, s *session) Result {
	if s.cfg.Units == "" {
		return skip("no unit files given (--units)")
	}
	path := s.cfg.Units
	sc, err := await(ctx, func() unitsScan { return scanUnits(path) })
	if err == nil {
		err = sc.err
	}
	if err != nil {
		return fail("check --units: a unit file, or a directory of *.service files", "%v", err)
	}
	if sc.files == 0 {
		return warn("point --units at the directory of aerie's unit files (deploy/ or /etc/systemd/system)", "no *.service files in %s", path)
	}
	if sc.commands == 0 {
		return warn("", "%s in %s, none with an Exec command", plural(sc.files, "unit file"), path)
	}
	unchecked := ""
	if len(sc.unchecked) > 0 {
		unchecked = "; not checked (specifier or variable in the path): " + strings.Join(sc.unchecked, ", ")
	}
	if len(sc.problems) > 0 {
		return fail(strings.Join(sc.fixes, "; "), "%s%s", strings.Join(sc.problems, "; "), unchecked)
	}
	return pass("%s, %s; every program named exists and is executable: %s%s",
		plural(sc.files, "unit file"), plural(sc.commands, "command"), strings.Join(sc.ok, ", "), unchecked)
}

// scanUnits checks the unit file at path, or every *.service file in the
// directory at path.
func scanUnits(path string) unitsScan {
	var sc unitsScan
	files, err := unitFiles(path)
	if err != nil {
		sc.err = err
		return sc
	}
	sc.files = len(files)
	for _, f := range files {
		cmds, err := readUnitCommands(f)
		if err != nil {
			sc.err = err
			return sc
		}
		for _, c := range cmds {
			sc.checkCommand(c)
		}
	}
	for _, exe := range sc.bad {
		b := sc.badWhy[exe]
		sc.problems = append(sc.problems, fmt.Sprintf("%s %s (%s)", exe, b.why, strings.Join(b.where, ", ")))
		sc.fixes = append(sc.fixes, b.fix)
	}
	return sc
}

// unitFiles is path itself when it is a file, or the *.service files in
// it, sorted, when it is a directory.
func unitFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	files, err := filepath.Glob(filepath.Join(path, "*.service"))
	if err != nil {
		return nil, fmt.Errorf("list unit files in %s: %w", path, err)
	}
	slices.Sort(files)
	return files, nil
}

// readUnitCommands returns the Exec settings of a unit file. It follows
// systemd's syntax: comments start with # or ;, a line ending in a
// backslash continues on the next, and spaces around '=' are ignored.
func readUnitCommands(path string) ([]unitCommand, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	name := filepath.Base(path)
	var cmds []unitCommand
	var pending strings.Builder // a setting continued over several lines
	start := 0
	lines := bufio.NewScanner(f)
	n := 0
	for lines.Scan() {
		n++
		text := strings.TrimSpace(lines.Text())
		if strings.HasPrefix(text, "#") || strings.HasPrefix(text, ";") {
			continue
		}
		if pending.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(text, `\`); ok {
			pending.WriteString(body)
			pending.WriteString(" ")
			continue
		}
		pending.WriteString(text)
		setting := pending.String()
		pending.Reset()
		key, value, ok := strings.Cut(setting, "=")
		if !ok {
			continue
		}
		key = strings.TrimSpace(key)
		if slices.Contains(execKeys, key) {
			cmds = append(cmds, unitCommand{file: name, line: start, key: key, value: strings.TrimSpace(value)})
		}
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return cmds, nil
}

// checkCommand records whether c's program is named by an absolute path
// to an executable file.
func (sc *unitsScan) checkCommand(c unitCommand) {
	exe := executable(c.value)
	if exe == "" {
		return // an empty setting resets the list
	}
	sc.commands++
	shown := fmt.Sprintf("%s: %s=%s", c.where(), c.key, dataset.Truncate(c.value, 60))
	if strings.ContainsAny(exe, "%$") {
		sc.unchecked = append(sc.unchecked, fmt.Sprintf("%s: %s", c.where(), exe))
		return
	}
	if !strings.HasPrefix(exe, "/") {
		sc.problems = append(sc.problems, shown+" uses PATH lookup (systemd searches its own fixed path, not your shell's PATH)")
		sc.fixes = append(sc.fixes, fmt.Sprintf("in %s write %s", c.where(), absoluteFor(exe)))
		return
	}
	why, fix := runnable(exe)
	if why == "" {
		if !slices.Contains(sc.ok, exe) {
			sc.ok = append(sc.ok, exe)
		}
		return
	}
	if sc.badWhy == nil {
		sc.badWhy = make(map[string]badExecutable)
	}
	b, seen := sc.badWhy[exe]
	if !seen {
		sc.bad = append(sc.bad, exe)
		b = badExecutable{why: why, fix: fix}
	}
	b.where = append(b.where, c.where()+" "+c.key)
	sc.badWhy[exe] = b
}

// runnable says why the program at the absolute path exe cannot run, and
// the fix; both are empty when it can.
func runnable(exe string) (why, fix string) {
	info, err := os.Stat(exe)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "does not exist", fmt.Sprintf("install %s (see deploy/README.md), or correct the path", exe)
	case err != nil:
		return fmt.Sprintf("cannot be checked: %v", err), "check the path and its permissions"
	case info.IsDir():
		return "is a directory", fmt.Sprintf("name the program in %s, not the directory", exe)
	case info.Mode().Perm()&0o111 == 0:
		return fmt.Sprintf("is not executable (mode %v)", info.Mode().Perm()), "chmod 0755 " + exe
	}
	return "", ""
}

// executable returns the program of a systemd command line: its first
// word, without the prefixes that change how systemd runs it (@, -, :,
// +, !) and without quotes.
func executable(cmdline string) string {
	v := strings.TrimLeft(strings.TrimSpace(cmdline), "@-:+!")
	if v == "" {
		return ""
	}
	if q := v[0]; q == '"' || q == '\'' {
		if end := strings.IndexByte(v[1:], q); end >= 0 {
			return v[1 : end+1]
		}
	}
	if i := strings.IndexAny(v, " \t"); i >= 0 {
		return v[:i]
	}
	return v
}

// absoluteFor suggests the absolute path of program name: where this
// shell finds it, or where deploy/README.md installs binaries.
func absoluteFor(name string) string {
	if p, err := exec.LookPath(name); err == nil && filepath.IsAbs(p) {
		return p + " (where this shell finds it)"
	}
	return filepath.Join(installDir, filepath.Base(name))
}
