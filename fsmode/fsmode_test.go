package fsmode_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/fsmode"
)

func TestParseUmask(t *testing.T) {
	for in, want := range map[string]int{"077": 0o077, "0077": 0o077, "0o022": 0o022, " 0 ": 0, "0777": 0o777, "7": 0o7} {
		if got, err := fsmode.ParseUmask(in); err != nil || got != want {
			t.Errorf("ParseUmask(%q) = %04o, %v; want %04o", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{"": "empty", "0o": "empty", "8": "not octal", "-1": "not octal", "u=rwx": "not octal", "1000": "above 0777", "0o7777": "above 0777"} {
		if _, err := fsmode.ParseUmask(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseUmask(%q): error %v, want one saying %q", in, err, msg)
		}
	}
	if got := fsmode.FormatUmask(0o22); got != "0022" {
		t.Errorf("FormatUmask(0o22) = %q", got)
	}
}

// A temporary file takes File less the umask, not os.CreateTemp's fixed
// 0600, or the mode of the file it is to replace. The umask is per
// process, so this test is not parallel.
func TestCreateTemp(t *testing.T) {
	old := fsmode.SetUmask(0o022)
	defer fsmode.SetUmask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	f, err := fsmode.CreateTemp(path, ".out.jsonl.*.tmp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if base := filepath.Base(f.Name()); filepath.Dir(f.Name()) != dir || !strings.HasPrefix(base, ".out.jsonl.") || !strings.HasSuffix(base, ".tmp") {
		t.Errorf("temporary file %s is not named by the pattern in %s", f.Name(), dir)
	}
	checkMode(t, f.Name(), 0o644)

	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o604); err != nil {
		t.Fatal(err)
	}
	g, err := fsmode.CreateTemp(path, "x*")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	checkMode(t, g.Name(), 0o604)
	if _, err := fsmode.CreateTemp(path, "a/b*"); err == nil {
		t.Error("a pattern with a path separator was taken")
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s has mode %04o, want %04o", path, got, want)
	}
}
